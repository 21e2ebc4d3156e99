/* nfq_delay: holds every packet of one netfilter queue for a fixed time, then lets it go.
 *
 *   nfq_delay --queue N --delay-us D [--ready-file F]
 *
 * A stand-in for `tc qdisc ... netem delay D` on kernels built without netem: the caller
 * steers a namespace's outgoing packets to queue N (iptables -j NFQUEUE --queue-num N
 * --queue-bypass) and runs this inside the same namespace. Packets keep their order: the
 * delay is the same for all of them, so the oldest is always the next one due. Only packet
 * metadata is copied to user space (the verdict needs the id, nothing else).
 *
 * The queue fails open (a full queue passes packets instead of dropping them) and the rule
 * should use --queue-bypass, so that traffic still flows, undelayed, if this process is
 * gone: a test then sees no delay instead of a hang.
 *
 * --ready-file F is created once the queue is bound, so the caller adds its rule only then.
 * Exits 0 on SIGTERM/SIGINT, 1 on a setup error (with the reason on stderr). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { kMaxPending = 1 << 16 };

struct pending {
  uint32_t id;
  int64_t due_ns;
};

static struct pending ring[kMaxPending];
static unsigned head, tail; /* ring[head..tail) are held, oldest first */
static int64_t delay_ns;
static volatile sig_atomic_t stop;
static struct nfq_q_handle *qh;

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void release(uint32_t id) { nfq_set_verdict(qh, id, NF_ACCEPT, 0, NULL); }

static int on_packet(struct nfq_q_handle *q, struct nfgenmsg *msg, struct nfq_data *nfa, void *data) {
  (void)q, (void)msg, (void)data;
  struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
  if (!ph) return 0;
  uint32_t id = ntohl(ph->packet_id);
  if (tail - head == kMaxPending) {
    release(id); /* never drop: past this many held packets, pass the newest at once */
    return 0;
  }
  ring[tail % kMaxPending] = (struct pending){id, now_ns() + delay_ns};
  ++tail;
  return 0;
}

static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

static void usage(void) {
  fprintf(stderr, "usage: nfq_delay --queue N --delay-us D [--ready-file F]\n");
  exit(2);
}

int main(int argc, char **argv) {
  long queue = -1, delay_us = -1;
  const char *ready = NULL;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--queue") && i + 1 < argc) queue = strtol(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--delay-us") && i + 1 < argc) delay_us = strtol(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--ready-file") && i + 1 < argc) ready = argv[++i];
    else usage();
  }
  if (queue < 0 || queue > 65535 || delay_us < 0 || delay_us > 10000000) usage();
  delay_ns = delay_us * 1000;

  struct nfq_handle *h = nfq_open();
  if (!h) {
    fprintf(stderr, "nfq_delay: nfq_open: %s\n", strerror(errno));
    return 1;
  }
  nfq_unbind_pf(h, AF_INET); /* older kernels want this before the bind; newer ignore both */
  nfq_bind_pf(h, AF_INET);
  qh = nfq_create_queue(h, (uint16_t)queue, &on_packet, NULL);
  if (!qh) {
    fprintf(stderr, "nfq_delay: cannot bind queue %ld: %s\n", queue, strerror(errno));
    return 1;
  }
  if (nfq_set_mode(qh, NFQNL_COPY_META, 0) < 0) {
    fprintf(stderr, "nfq_delay: nfq_set_mode: %s\n", strerror(errno));
    return 1;
  }
  nfq_set_queue_maxlen(qh, kMaxPending);
  nfq_set_queue_flags(qh, NFQA_CFG_F_FAIL_OPEN, NFQA_CFG_F_FAIL_OPEN);
  nfnl_rcvbufsiz(nfq_nfnlh(h), 8 << 20);
  int fd = nfq_fd(h);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);

  if (ready) {
    FILE *f = fopen(ready, "w");
    if (!f) {
      fprintf(stderr, "nfq_delay: cannot create %s: %s\n", ready, strerror(errno));
      return 1;
    }
    fclose(f);
  }

  static char buf[1 << 16];
  while (!stop) {
    int64_t now = now_ns();
    while (head != tail && ring[head % kMaxPending].due_ns <= now) {
      release(ring[head % kMaxPending].id);
      ++head;
    }
    /* Sleep until the next packet is due or another arrives. Below ~50 us the scheduler's
     * wake-up is too coarse: spin on the socket instead. */
    int64_t wait_ns = head == tail ? 100000000 : ring[head % kMaxPending].due_ns - now;
    if (wait_ns > 50000) {
      struct timespec ts = {wait_ns / 1000000000, wait_ns % 1000000000};
      struct pollfd p = {fd, POLLIN, 0};
      if (ppoll(&p, 1, &ts, NULL) <= 0) continue;
    }
    for (;;) {
      ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n > 0) {
        nfq_handle_packet(h, buf, (int)n);
        continue;
      }
      /* ENOBUFS: the kernel dropped queue messages for lack of room (those packets pass,
       * the queue failing open); keep going. */
      if (n < 0 && (errno == EINTR || errno == ENOBUFS)) continue;
      break; /* EAGAIN: nothing more now */
    }
  }
  while (head != tail) release(ring[head++ % kMaxPending].id);
  nfq_destroy_queue(qh);
  nfq_close(h);
  return 0;
}
