/* braid transport plugin ABI, versions 1 to 10.
 *
 * A transport plugin is a shared library that exports a table of function pointers that
 * mirrors braid's transport seam one to one:
 *     const braidTransportPlugin_v10_t braidTransportPlugin_v10; (device areas; current)
 *     const braidTransportPlugin_v9_t braidTransportPlugin_v9;   (reduction on arrival)
 *     const braidTransportPlugin_v8_t braidTransportPlugin_v8;   (failures seen)
 *     const braidTransportPlugin_v7_t braidTransportPlugin_v7;   (receives ahead)
 *     const braidTransportPlugin_v6_t braidTransportPlugin_v6;   (failed peers)
 *     const braidTransportPlugin_v5_t braidTransportPlugin_v5;   (slot memory)
 *     const braidTransportPlugin_v4_t braidTransportPlugin_v4;   (large messages)
 *     const braidTransportPlugin_v3_t braidTransportPlugin_v3;   (the job key)
 *     const braidTransportPlugin_v2_t braidTransportPlugin_v2;   (zero copy)
 *     const braidTransportPlugin_v1_t braidTransportPlugin_v1;   (the first version)
 * braid looks for v10 first, then v9, v8, v7, v6, v5, v4, v3, v2, v1, and speaks all ten. braid finds plugins through
 * BRAID_TRANSPORT_PLUGIN (a ':'-separated list of files) and in the plugin folder next to
 * libbraid.so (<libdir>/braid/libbraid-net-<name>.so).
 *
 * The model (the same as braid's built-in shared-memory and tcp transports):
 *   - A transport instance belongs to one communicator. It offers one-directional
 *     connections to a peer on a channel; each carries fixed-size slots in FIFO order.
 *   - Setup runs in three phases: create_recv() for every incoming connection (its blob
 *     travels to the sender through braid's bootstrap), connect_send() with that blob, and,
 *     after a barrier among all ranks, establish().
 *   - The sender reserves a slot, writes up to slot_bytes into it, and posts it; the
 *     receiver peeks the oldest slot, consumes it in place, and releases it. No call blocks
 *     except establish(), which returns by its deadline.
 *   - A connection is used by one thread at a time (never concurrently); different
 *     connections of one transport may be used by different threads at once.
 *
 * Errors: every call that can fail returns a braidPluginResult_t and, on failure, fills the
 * caller's braidPluginError_v1 with a message and, for a failed peer, its rank. braid
 * prefixes the plugin's name and this rank. Output parameters are written only on success.
 *
 * This header is pure C99 and includes nothing but the standard headers it needs.
 */
#ifndef BRAID_TRANSPORT_PLUGIN_H_
#define BRAID_TRANSPORT_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BRAID_TRANSPORT_PLUGIN_ABI_VERSION 10
#define BRAID_TRANSPORT_PLUGIN_SYMBOL_V1 "braidTransportPlugin_v1"
#define BRAID_TRANSPORT_PLUGIN_SYMBOL_V2 "braidTransportPlugin_v2"
#define BRAID_TRANSPORT_PLUGIN_SYMBOL_V3 "braidTransportPlugin_v3"
#define BRAID_TRANSPORT_PLUGIN_SYMBOL_V4 "braidTransportPlugin_v4"
#define BRAID_TRANSPORT_PLUGIN_SYMBOL_V5 "braidTransportPlugin_v5"
#define BRAID_TRANSPORT_PLUGIN_SYMBOL_V6 "braidTransportPlugin_v6"
#define BRAID_TRANSPORT_PLUGIN_SYMBOL_V7 "braidTransportPlugin_v7"
#define BRAID_TRANSPORT_PLUGIN_SYMBOL_V8 "braidTransportPlugin_v8"
#define BRAID_TRANSPORT_PLUGIN_SYMBOL_V9 "braidTransportPlugin_v9"
#define BRAID_TRANSPORT_PLUGIN_SYMBOL_V10 "braidTransportPlugin_v10"

/* In C++ int is its underlying type, so that whatever int a plugin returns is a value of it,
 * which braid checks, and not undefined behavior in braid (as braid.h's enums). */
#ifdef __cplusplus
typedef enum : int {
#else
typedef enum {
#endif
  braidPluginOk = 0,
  braidPluginWouldBlock = 1,      /* not now: retry after progress; no error */
  braidPluginInvalidArgument = 2, /* bad configuration or a malformed blob */
  braidPluginSystemError = 3,     /* a local resource or library call failed */
  braidPluginRemoteError = 4,     /* the peer failed or closed; error.rank names it */
  braidPluginTimeout = 5,         /* a deadline passed (establish) */
  braidPluginInternal = 6
} braidPluginResult_t;

typedef struct {
  int rank;             /* the rank the failure is about, or -1 */
  char message[512];    /* NUL-terminated */
} braidPluginError_v1;

/* What braid logs for the plugin: level 1 warn, 2 info, 3 trace; from version 3, level 0 is a
 * SECURITY line (a refused connection), logged whatever BRAID_DEBUG says. */
typedef void (*braidPluginLogFn)(int level, const char* message);

typedef struct {
  int rank;
  int nranks;
  uint64_t nonce;           /* session nonce: refuse traffic that carries another */
  size_t slot_bytes;        /* payload per slot */
  int nslots;               /* FIFO depth */
  int numa_node;            /* where to place receive buffers; -1 for anywhere */
  double connect_timeout_sec;
  const char* net_if;       /* interface list in NCCL_SOCKET_IFNAME syntax, or "" */
  const char* const* channel_net_ifs; /* the NIC the topology gives ring channel c, or "" */
  int num_channel_net_ifs;
  const char* ib_hca;       /* RDMA NICs in NCCL_IB_HCA syntax, or "" */
  int ib_gid_index;         /* RoCE GID index, -1 for automatic */
  int log_level;            /* braid's level, so a plugin can skip formatting */
  braidPluginLogFn log;     /* never NULL */
  /* Setup calls that wait on a peer should call this every few hundred milliseconds and
   * give up with its error: another rank failed its setup and the job is being aborted.
   * May be NULL. */
  braidPluginResult_t (*abort_check)(void* context, braidPluginError_v1* error);
  void* abort_check_context;
} braidTransportConfig_v1;

typedef struct {
  int rank;
  const char* host_id;      /* hostname + boot id, or BRAID_HOST_ID; a remote peer of this host
                             * in another network namespace gets that id with " netns:<inode>"
                             * added: it shares no loopback interface with the local rank.
                             * Valid for the call only. */
  int64_t pid;              /* 0 for a peer whose pid namespace is not this process's */
  uint64_t nonce;
} braidPeerInfo_v1;

typedef struct {
  void* data;               /* reserve_send: where to write; peek_recv: the payload */
  size_t bytes;             /* peek_recv: payload length */
  uint64_t tag;             /* travels with the payload */
} braidSlot_v1;

/* How braid can sleep until a connection may have work: a futex word (sleep while
 * *futex_word == futex_value) and/or a file descriptor to poll for fd_events. Neither set
 * means "do not sleep, yield and retry". */
typedef struct {
  const uint32_t* futex_word;
  uint32_t futex_value;
  int fd;
  short fd_events;
} braidWaitHandle_v1;

typedef struct braidTransportPlugin_v1_s {
  uint32_t abi_version;     /* 1 in a v1 table; 2 to 8 in the base of a later table */
  const char* name;         /* what BRAID_TRANSPORT selects, e.g. "ucx" */
  const char* version;      /* the plugin's own version and its library's, for braid-info */

  /* One transport instance per communicator (braid creates a few: rings and the
   * small-message mesh). */
  braidPluginResult_t (*init)(const braidTransportConfig_v1* config, void** transport,
                              braidPluginError_v1* error);
  void (*finalize)(void* transport);

  /* Score for carrying traffic from local to remote; 0 = cannot, higher wins. braid's
   * built-ins: loopback 1000 (same process), shm 100 (same host), tcp 10 (anywhere). */
  int (*score)(void* transport, const braidPeerInfo_v1* local, const braidPeerInfo_v1* remote);
  /* One line describing what the instance found (devices, transports), for braid-info. */
  const char* (*describe)(void* transport);

  /* Phase 1: resources to receive from peer on channel. The blob (at most *blob_bytes on
   * entry) is written to blob and its length to *blob_bytes. When the buffer is too small,
   * returns braidPluginInvalidArgument with the size needed in *blob_bytes. */
  braidPluginResult_t (*create_recv)(void* transport, int peer, int channel, void** connection,
                                     void* blob, size_t* blob_bytes, braidPluginError_v1* error);
  /* Phase 2: attach to the receiver the blob describes. */
  braidPluginResult_t (*connect_send)(void* transport, int peer, int channel, const void* blob,
                                      size_t blob_bytes, void** connection, braidPluginError_v1* error);
  /* Phase 3: completes every connection created so far; returns by deadline_ns
   * (CLOCK_MONOTONIC nanoseconds). */
  braidPluginResult_t (*establish)(void* transport, int64_t deadline_ns, braidPluginError_v1* error);

  /* Connection calls; none blocks. */
  size_t (*slot_bytes)(void* connection);
  braidPluginResult_t (*reserve_send)(void* connection, braidSlot_v1* slot, braidPluginError_v1* error);
  braidPluginResult_t (*post_send)(void* connection, const braidSlot_v1* slot, size_t bytes,
                                   braidPluginError_v1* error);
  braidPluginResult_t (*peek_recv)(void* connection, braidSlot_v1* slot, braidPluginError_v1* error);
  braidPluginResult_t (*release_recv)(void* connection, const braidSlot_v1* slot, braidPluginError_v1* error);
  /* Drives the connection. braid calls it on every connection of a channel while the
   * channel waits for one: by its return a receiving connection has told its sender of
   * every slot released (a ring may wait to send on each rank at once, each sender
   * counting on the whole FIFO). */
  braidPluginResult_t (*progress)(void* connection, braidPluginError_v1* error);
  /* Nonzero when every posted send has left this process's buffers. */
  int (*flushed)(void* connection);
  /* Nonzero when the connection itself reports a dead peer (braid's own liveness checks
   * cover the others). */
  int (*sees_peer_failure)(void* connection);
  void (*wait_handle)(void* connection, int for_send, braidWaitHandle_v1* handle);
  void (*disarm)(void* connection, int for_send);
  /* Frees the connection; the transport outlives its connections. */
  void (*close)(void* connection);
} braidTransportPlugin_v1_t;

/* Version 2: version 1 (its base, with abi_version 2) and zero copy. Every entry must be
 * set; a transport without zero copy returns 0 from sends_from_user, forwards
 * peek_recv_into to its peek_recv, and returns UINT64_MAX from tag_mask. */
typedef struct braidTransportPlugin_v2_s {
  braidTransportPlugin_v1_t base;
  /* Nonzero when post_send_from works on this connection. */
  int (*sends_from_user)(void* connection);
  /* After a successful reserve_send, posts bytes read from src (braid's caller's memory)
   * as the next message instead of the slot's contents (slot->tag travels with it). braid
   * keeps src unchanged until flushed() says every send has left. */
  braidPluginResult_t (*post_send_from)(void* connection, const braidSlot_v1* slot, const void* src,
                                        size_t bytes, braidPluginError_v1* error);
  /* peek_recv, asking that the payload (bytes long) land at dst. slot->data == dst says
   * it did; otherwise the slot is one of the connection's, as from peek_recv. */
  braidPluginResult_t (*peek_recv_into)(void* connection, braidSlot_v1* slot, void* dst, size_t bytes,
                                        braidPluginError_v1* error);
  /* The bits of a slot's tag this connection carries (a receiver compares under it). */
  uint64_t (*tag_mask)(void* connection);
} braidTransportPlugin_v2_t;

/* The job's key (version 3): the secret every rank of an authenticated job holds
 * (BRAID_AUTH_KEY, or drawn by braidrun). A transport whose peers reach it directly (its
 * own hellos, handshakes or sockets, rather than the blobs braid passes through its
 * authenticated store) admits only peers that prove they hold it, for example with an
 * HMAC-SHA256 over a challenge it put in its blob, and logs every refusal at level 0. */
typedef struct {
  const uint8_t* key;       /* key_bytes bytes, or NULL when the job has no key */
  size_t key_bytes;
  int tls;                  /* BRAID_TLS=1: encrypt the traffic where the transport can */
} braidJobKey_v1;

/* Version 3: version 2 (its base, with abi_version 3) and the job key. braid calls
 * init_keyed instead of base.base.init; the key outlives the call only as the plugin copies
 * it. */
typedef struct braidTransportPlugin_v3_s {
  braidTransportPlugin_v2_t base;
  braidPluginResult_t (*init_keyed)(const braidTransportConfig_v1* config, const braidJobKey_v1* key,
                                    void** transport, braidPluginError_v1* error);
} braidTransportPlugin_v3_t;

/* Version 4: version 3 (its base, with abi_version 4), messages larger than a slot, and a
 * look at the next message's tag that commits nothing. */
typedef struct braidTransportPlugin_v4_s {
  braidTransportPlugin_v3_t base;
  /* The largest message this connection carries when the sender posts it with
   * post_send_from and the receiver asks for it with peek_recv_into (the payload then goes
   * from braid's caller's memory to braid's caller's memory and never fills a slot); at
   * least slot_bytes. It must be the same on both ends of a connection. braid sends such
   * messages only when every connection of every rank of the communicator carries them,
   * and then only in operations whose steps move whole blocks (allgather, alltoall,
   * point-to-point groups); otherwise every message fits a slot. A peek_recv_into for a
   * message larger than slot_bytes must land it at dst. */
  size_t (*max_message_bytes)(void* connection);
  /* The tag of the oldest incoming message, without taking it and without committing it to
   * a slot (no receive posted for it), or braidPluginWouldBlock. braid looks with it while a
   * wait lasts, for a peer that issued another call; a later peek_recv_into still lands the
   * message where it asks. A transport whose peek_recv commits nothing may call it. */
  braidPluginResult_t (*peek_tag)(void* connection, uint64_t* tag, braidPluginError_v1* error);
} braidTransportPlugin_v4_t;

/* Version 5: version 4 (its base, with abi_version 5) and the memory a connection's slots
 * live in. */
typedef struct braidTransportPlugin_v5_s {
  braidTransportPlugin_v4_t base;
  /* Where every slot this connection hands out (reserve_send) or fills (peek_recv, and
   * peek_recv_into when the message is not where it was asked to land) lives, as mapped in
   * this process, for as long as the connection is open: *base and *bytes, or *base NULL
   * when the slots are not such memory. braid's direct GPU path registers it with the GPU
   * (cudaHostRegister), whose kernels then write payloads into send slots before post_send
   * and read received ones before release_recv; it uses that path only when every
   * connection of the communicator gives its memory. */
  void (*slot_memory)(void* connection, void** base, size_t* bytes);
} braidTransportPlugin_v5_t;

/* Version 6: version 5 (its base, with abi_version 6) and the peers braid knows have failed. */
typedef struct braidTransportPlugin_v6_s {
  braidTransportPlugin_v5_t base;
  /* braid has learnt that `rank` failed: its process exited or stopped, it made no progress
   * for the communicator's timeout, or the survivors agreed it failed. Nothing more will be
   * sent to or received from it. The transport need not wait for it again: closing a
   * connection to it, or finalize, may drop what is still in flight to or from it at once
   * rather than wait for it to go. braid calls it when it tears a communicator down (one that
   * broke, one whose ranks agreed on failed ones, or one with a peer on this host whose
   * process exited or is stopped), before the first close, from the thread that then closes
   * the connections; it may call it for a rank more than once, and never for this
   * transport's own rank. */
  void (*peer_failed)(void* transport, int rank);
} braidTransportPlugin_v6_t;

/* Version 7: version 6 (its base, with abi_version 7) and receives braid announces ahead. */
typedef struct braidTransportPlugin_v7_s {
  braidTransportPlugin_v6_t base;
  /* braid will ask for the message `ahead` places after the oldest one it has not released
   * on this connection (0: the next it peeks) with peek_recv_into(dst, bytes), or with
   * peek_recv when dst is NULL; bytes is its length. A transport that posts receives (UCX)
   * may post that one now, so that a message that arrives before braid asks for it lands in
   * place rather than in a queue it is copied out of later. braid announces a message only
   * when its current operation will ask for it, only after the ones before it (ahead 1
   * after ahead 0), again only with the same dst and bytes, and leaves the bytes at dst
   * alone (no reads, no writes) from then until that peek; it may announce some messages
   * and not others. It is a hint: a transport with no use for it returns braidPluginOk,
   * and the peek still says where the message landed. */
  braidPluginResult_t (*expect_recv)(void* connection, size_t ahead, void* dst, size_t bytes,
                                     braidPluginError_v1* error);
} braidTransportPlugin_v7_t;

/* Version 8: version 7 (its base, with abi_version 8) and the failures a transport has seen. */
typedef struct braidTransportPlugin_v8_s {
  braidTransportPlugin_v7_t base;
  /* Whether this transport has seen `rank` fail: a connection to or from it whose peer
   * failure it reports (sees_peer_failure) found its peer gone (a socket's end, an
   * endpoint's error). The transport first drives what it must for the network's news to be
   * heard (UCX's workers), without waiting. braid asks while the survivors of a failure
   * agree on who failed, for the ranks that have yet to vote, from the agreeing thread and
   * only while no operation of the communicator is in flight: no connection of the
   * transport is in use then. An operation that ended may have left receives posted into
   * the caller's memory (announced with expect_recv, or asked for with peek_recv_into, by
   * a call that failed): nothing may land there any more, so a transport that drives its
   * progress here cancels those first, and does not drive what it cannot cancel.
   * 1: seen failed; 0: not seen, or the transport cannot tell. Never called for the
   * transport's own rank. */
  int (*saw_peer_fail)(void* transport, int rank);
} braidTransportPlugin_v8_t;

/* A reduction braid hands a transport with a receive (version 9): the payload is to be
 * combined with `local` into the receive's destination, element by element, as it arrives.
 * fn(ctx, dst, payload, local, bytes) writes dst[0, bytes) = payload (op) local[0, bytes) for
 * a whole number of elements (bytes a multiple of elem_bytes); the transport passes the three
 * pointers advanced to the same offset, may call it for any split of the message into whole
 * elements, in any order, and must call it exactly once for every element. It runs on the
 * thread that drives the connection (inside peek_recv_reduce or progress). local may be dst. */
typedef struct {
  const void* local;
  void (*fn)(void* ctx, void* dst, const void* payload, const void* local, size_t bytes);
  void* ctx;
  size_t elem_bytes;
} braidArrivalReduce_v1;

/* Version 9: version 8 (its base, with abi_version 9) and reduction on arrival. */
typedef struct braidTransportPlugin_v9_s {
  braidTransportPlugin_v8_t base;
  /* Nonzero when peek_recv_reduce may reduce on this connection; braid then reduces the
   * payloads it receives through it. */
  int (*reduces_on_arrival)(void* connection);
  /* peek_recv, asking that dst (bytes long) become the payload reduced with reduce->local.
   * slot->data == dst says it has (and slot->bytes is the payload's length); otherwise the
   * payload is in a slot, as from peek_recv, and dst is untouched. braid checks the slot's
   * tag and length after, so a message of another call may already have been folded into
   * dst. Called again before release_recv, it returns the same message; the reduction is
   * copied, not kept by pointer. */
  braidPluginResult_t (*peek_recv_reduce)(void* connection, braidSlot_v1* slot, void* dst, size_t bytes,
                                          const braidArrivalReduce_v1* reduce, braidPluginError_v1* error);
  /* expect_recv for a message braid will ask for with peek_recv_reduce(dst, bytes, reduce):
   * braid leaves dst and reduce->local alone from now until that peek. A hint, as
   * expect_recv. */
  braidPluginResult_t (*expect_reduce)(void* connection, size_t ahead, void* dst, size_t bytes,
                                       const braidArrivalReduce_v1* reduce, braidPluginError_v1* error);
} braidTransportPlugin_v9_t;

/* GPU memory braid gives a connection for its device area (version 10): the area's address
 * as the process sees it, and a dmabuf of it where the GPU gives one (dmabuf_fd >= 0, the
 * area at dmabuf_offset in it; braid closes the fd after the call), else -1. */
typedef struct {
  void* base;
  int dmabuf_fd;
  uint64_t dmabuf_offset;
} braidDeviceMemory_v1;

/* Version 10: version 9 (its base, with abi_version 10) and device areas (GPUDirect RDMA).
 * With BRAID_CUDA_PATH=ipc, each end of a connection that has them gets an area of GPU
 * memory of device_area_bytes (one payload per slot) and registers it with its NIC; the
 * receiving end names its own for the sender (through braid's store), and the sender
 * attaches it. Once every rank has, braid calls set_device_area on both ends. The sender's
 * kernels then write a device call's payload at device_data(slot) of a reserved slot, in
 * the sender's own area, and post_send_device sends it into the receiver's area, the slot
 * itself carrying the tag and length in order with the other messages. On the receiving end
 * recv_in_device_area says whether a peeked slot's payload is in the area, at
 * device_data(slot). release_device_area undoes registration before braid frees the area.
 * A connection without device areas returns 0 from device_area_bytes, and braid calls none
 * of the others on it. */
typedef struct braidTransportPlugin_v10_s {
  braidTransportPlugin_v9_t base;
  size_t (*device_area_bytes)(void* connection);
  /* Registers this end's area (device_area_bytes long). A receiving end writes its name for
   * the sender, NUL-terminated, into name (name_capacity bytes); a sending end writes "". */
  braidPluginResult_t (*register_device_area)(void* connection, const braidDeviceMemory_v1* area, char* name,
                                              size_t name_capacity, braidPluginError_v1* error);
  /* Sending end: the receiver's area by the name its register_device_area wrote. */
  braidPluginResult_t (*attach_peer_device_area)(void* connection, const char* name, braidPluginError_v1* error);
  /* The area is in use from now on (base, as registered), or no longer (NULL). */
  void (*set_device_area)(void* connection, void* base);
  void (*release_device_area)(void* connection);
  /* Where the payload of a reserved (sending) or peeked (receiving) slot lives in this end's
   * area; NULL while the area is not in use. */
  void* (*device_data)(void* connection, const braidSlot_v1* slot);
  braidPluginResult_t (*post_send_device)(void* connection, const braidSlot_v1* slot, size_t bytes,
                                          braidPluginError_v1* error);
  /* Nonzero when the slot peek_recv returned last has its payload in the area. */
  int (*recv_in_device_area)(void* connection, const braidSlot_v1* slot);
} braidTransportPlugin_v10_t;

#ifdef __cplusplus
}
#endif

#endif /* BRAID_TRANSPORT_PLUGIN_H_ */
