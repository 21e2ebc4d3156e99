/* Bad input must return braidInvalidArgument with a message naming the argument (and, for a
 * call on a communicator, the calling rank), and the communicator must stay usable
 * afterwards. Prints "bad input ok" on success. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "braid/braid.h"

static int failures = 0;
static char rankWords[32] = "";

static void expect(braidResult_t r, braidComm_t comm, const char* word, const char* what) {
  const char* msg = braidGetLastError(comm);
  if (r != braidInvalidArgument || !strstr(msg, word) || (comm && !strstr(msg, rankWords)) || strstr(msg, ": :")) {
    fprintf(stderr, "%s: got %s, message '%s' (wanted invalid argument naming '%s'%s%s)\n", what,
            braidGetErrorString(r), msg, word, comm ? " and " : "", comm ? rankWords : "");
    ++failures;
  }
}

int main(void) {
  braidComm_t comm = NULL;
  if (braidCommInitFromEnv(&comm) != braidSuccess) {
    fprintf(stderr, "init failed: %s\n", braidGetLastError(NULL));
    return 1;
  }
  int rank = 0, n = 0;
  braidCommUserRank(comm, &rank);
  braidCommCount(comm, &n);
  snprintf(rankWords, sizeof(rankWords), "on rank %d", rank);
  float buf[16] = {0};
  size_t counts[2] = {4, 4}, displs[2] = {0, 4};
  expect(braidAllReduce(NULL, buf, 4, braidFloat32, braidSum, comm, NULL), comm, "sendbuff", "NULL sendbuff");
  expect(braidAllReduce(buf, NULL, 4, braidFloat32, braidSum, comm, NULL), comm, "recvbuff", "NULL recvbuff");
  expect(braidAllReduce(buf, buf, 4, (braidDataType_t)42, braidSum, comm, NULL), comm, "datatype", "bad dtype");
  expect(braidAllReduce(buf, buf, 4, braidFloat32, (braidRedOp_t)-1, comm, NULL), comm, "op", "bad op");
  expect(braidAllReduce(buf, buf, SIZE_MAX / 2, braidFloat32, braidSum, comm, NULL), comm, "count", "count overflow");
  expect(braidAllReduce(buf, buf + 1, 4, braidFloat32, braidSum, comm, NULL), comm, "overlap", "partial overlap");
  expect(braidAllReduce(buf, buf, 4, braidFloat32, braidSum, comm, (braidStream_t)buf), comm, "stream", "stream");
  expect(braidBroadcast(buf, buf, 4, braidFloat32, n, comm, NULL), comm, "root", "root = nranks");
  expect(braidBroadcast(buf, buf, 4, braidFloat32, -1, comm, NULL), comm, "root", "root = -1");
  expect(braidAllReduce(buf, buf, 4, braidFloat32, braidSum, NULL, NULL), NULL, "comm", "NULL comm");
  expect(braidCommCount(comm, NULL), comm, "count", "NULL count");
  expect(braidAllGatherV(buf, 4, buf, NULL, displs, braidFloat32, comm, NULL), comm, "recvcounts", "NULL recvcounts");
  expect(braidAllToAllV(buf, counts, displs, buf, counts, NULL, braidFloat32, comm, NULL), comm, "rdispls",
         "NULL rdispls");
  expect(braidSend(buf, 4, braidFloat32, n, comm, NULL), comm, "peer", "peer = nranks");
  expect(braidRedOpDestroy(braidSum, comm), comm, "op", "destroying a built-in op");
  int exclude[1] = {n};
  braidComm_t child = NULL;
  expect(braidCommShrink(comm, exclude, -1, &child, BRAID_SHRINK_DEFAULT), comm, "excludeCount", "excludeCount < 0");
  expect(braidCommShrink(comm, exclude, 1, &child, 77), comm, "flags", "unknown shrink flags");
  expect(braidCommShrink(comm, exclude, 1, &child, BRAID_SHRINK_DEFAULT), comm, "excludeRanks", "exclude = nranks");
  braidUniqueId growId;
  expect(braidCommGetGrowId(comm, n, &growId), comm, "newSize", "newSize not larger");
  braidComm_t other = NULL;
  braidUniqueId id;
  memset(&id, 0x5a, sizeof(id));
  expect(braidCommInitRank(&other, 2, id, 0), NULL, "id", "garbage unique id");
  if (braidGetUniqueId(&id) != braidSuccess) ++failures;
  expect(braidCommInitRank(&other, 2, id, 2), NULL, "rank", "rank >= nranks");
  expect(braidCommInitRank(&other, 0, id, 0), NULL, "nranks", "nranks = 0");
  /* Still usable: every rank reaches here having made no collective call yet. */
  for (int i = 0; i < 16; ++i) buf[i] = 1.0f;
  if (braidAllReduce(buf, buf, 16, braidFloat32, braidSum, comm, NULL) != braidSuccess || buf[15] != (float)n) {
    fprintf(stderr, "communicator unusable after bad input: %s\n", braidGetLastError(comm));
    ++failures;
  }
  braidCommDestroy(comm);
  if (failures) return 1;
  printf("bad input ok rank %d\n", rank);
  return 0;
}
