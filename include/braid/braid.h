/*
 * braid: collective communication for distributed training. Pure C99 API, shaped like
 * NCCL's so that NCCL users feel at home.
 *
 * Every function returns a braidResult_t. On failure, braidGetLastError(comm) returns a
 * message naming the argument, the rank and the operation. Collectives must be called in
 * the same order on every rank of a communicator; braid detects a mismatch and fails
 * instead of corrupting data. A peer that dies or stalls makes the pending call fail on
 * every survivor (braidRemoteError / braidTimeout) instead of hanging.
 */
#ifndef BRAID_BRAID_H_
#define BRAID_BRAID_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BRAID_MAJOR 0
#define BRAID_MINOR 1
#define BRAID_PATCH 0
#define BRAID_VERSION_CODE (BRAID_MAJOR * 10000 + BRAID_MINOR * 100 + BRAID_PATCH)

/* In C++ each enum of this header has int as its fixed underlying type, so that any int a C
 * caller passes (a cast, a binding's integer) is a value of the enum, which braid checks and
 * refuses by name, and not undefined behavior in the library. In C an enum is an int-sized
 * integer either way. */
#ifndef BRAID_ENUM_INT
#ifdef __cplusplus
#define BRAID_ENUM_INT : int
#else
#define BRAID_ENUM_INT
#endif
#endif

typedef enum BRAID_ENUM_INT {
  braidSuccess = 0,
  braidInvalidArgument = 1,
  braidSystemError = 2,
  braidRemoteError = 3,
  braidTimeout = 4,
  braidAborted = 5,
  braidInternalError = 6,
  braidInProgress = 7,
  /* The communicator was revoked (braidCommRevoke on any rank): every pending and later
   * operation fails with this; braidCommShrink, braidCommSplit and destroy still work. */
  braidRevoked = 8
} braidResult_t;

typedef enum BRAID_ENUM_INT {
  braidInt8 = 0,
  braidUint8 = 1,
  braidInt32 = 2,
  braidUint32 = 3,
  braidInt64 = 4,
  braidUint64 = 5,
  braidFloat16 = 6,
  braidBFloat16 = 7,
  braidFloat32 = 8,
  braidFloat64 = 9,
  /* OCP 8-bit floats (NCCL's numbering): E4M3 (bias 7, no infinity, largest 448) and E5M2
   * (bias 15, IEEE-style, largest 57344). They reduce in fp32 and round once, to nearest
   * even, saturating: a result beyond the largest finite value becomes that value. */
  braidFloat8e4m3 = 10,
  braidFloat8e5m2 = 11,
  braidInt16 = 12,
  braidUint16 = 13
} braidDataType_t;

/* Bitwise ops apply to integer types only. braidRedOpCreatePreMulSum returns further
 * values (>= braidNumOps), valid on the communicator that created them. */
typedef enum BRAID_ENUM_INT {
  braidSum = 0,
  braidProd = 1,
  braidMax = 2,
  braidMin = 3,
  braidAvg = 4,
  braidBitAnd = 5,
  braidBitOr = 6,
  braidBitXor = 7,
  braidNumOps = 8,
  braidMaxRedOp = 0x7fffffff
} braidRedOp_t;

#define BRAID_UNIQUE_ID_BYTES 128
/* Opaque: the store address and the job's session nonce. Share it out of band. */
typedef struct {
  char internal[BRAID_UNIQUE_ID_BYTES];
} braidUniqueId;

typedef struct braidComm* braidComm_t;
/* A cudaStream_t. Collectives on device buffers (or given a stream) are enqueued on it and
 * return at once; NULL with device buffers is CUDA's legacy default stream. Host buffers
 * with a NULL stream run on the calling thread, as before. */
typedef void* braidStream_t;

/* Per-communicator settings, as NCCL's ncclConfig_t: start from BRAID_CONFIG_INITIALIZER and
 * set the fields wanted; a field left undefined keeps its default (or environment). */
#define BRAID_CONFIG_UNDEF_INT (-2147483647 - 1)
#define BRAID_CONFIG_MAGIC 0x62726366u
typedef struct {
  size_t size;          /* set by the initializer */
  unsigned int magic;   /* set by the initializer */
  unsigned int version; /* set by the initializer */
  /* 1: every call returns once done (the default, or BRAID_COMM_BLOCKING). 0: init and calls
   * on host buffers (collectives, sends, receives, groups) return braidInProgress and
   * complete in the background, in issue order; buffers must stay valid until
   * braidCommGetAsyncError stops returning braidInProgress. No other call may use a
   * communicator that is still joining (braidInvalidArgument). Children inherit the mode. */
  int blocking;
  /* > 0: seconds without progress before an operation fails, instead of BRAID_TIMEOUT. */
  int timeoutSeconds;
} braidConfig_t;
#define BRAID_CONFIG_INITIALIZER \
  { sizeof(braidConfig_t), BRAID_CONFIG_MAGIC, BRAID_VERSION_CODE, BRAID_CONFIG_UNDEF_INT, BRAID_CONFIG_UNDEF_INT }

/* Writes BRAID_VERSION_CODE to *version. */
braidResult_t braidGetVersion(int* version);

/* Starts a rendezvous store in this process and describes it in *uniqueId. Call on one
 * rank, then pass the id to every rank's braidCommInitRank. */
braidResult_t braidGetUniqueId(braidUniqueId* uniqueId);

/* Creates a communicator of `nranks` ranks; blocks until all ranks have joined or
 * BRAID_TIMEOUT seconds pass. */
braidResult_t braidCommInitRank(braidComm_t* comm, int nranks, braidUniqueId commId, int rank);

/* Creates a communicator from the launcher's environment: BRAID_RANK/BRAID_WORLD_SIZE/
 * BRAID_STORE_ADDR (braidrun), horovodrun --gloo's HOROVOD_RANK/HOROVOD_SIZE (rank 0
 * publishes the store's address through HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT), torchrun's
 * RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, OpenMPI's OMPI_COMM_WORLD_RANK/_SIZE or Slurm's
 * SLURM_PROCID/SLURM_NTASKS (these two with BRAID_STORE_ADDR or MASTER_ADDR/MASTER_PORT). */
braidResult_t braidCommInitFromEnv(braidComm_t* comm);

/* The same with a configuration (NULL: the defaults). In non-blocking mode they return
 * braidInProgress with *comm set at once; poll braidCommGetAsyncError(*comm) until it returns
 * something else: braidSuccess once joined, else the init's error. */
braidResult_t braidCommInitRankConfig(braidComm_t* comm, int nranks, braidUniqueId commId, int rank,
                                      const braidConfig_t* config);
braidResult_t braidCommInitFromEnvConfig(braidComm_t* comm, const braidConfig_t* config);

/* Waits for pending operations (and a non-blocking init), then frees the communicator. */
braidResult_t braidCommDestroy(braidComm_t comm);

/* Fails pending operations on this rank and tells the other ranks, then frees the
 * communicator. Never blocks on peers; a non-blocking init still running is stopped at its
 * next check (within about 200 ms, or the timeout while the store is unreachable). */
braidResult_t braidCommAbort(braidComm_t comm);

/* The first failure of work enqueued on a stream (device buffers), or of the communicator
 * itself; braidSuccess when there is none. Never blocks. In non-blocking mode also
 * braidInProgress while the init or any call is still running, and the first failure of a
 * call that ran in the background. */
braidResult_t braidCommGetAsyncError(braidComm_t comm, braidResult_t* asyncError);

braidResult_t braidCommCount(const braidComm_t comm, int* count);
braidResult_t braidCommUserRank(const braidComm_t comm, int* rank);

/* Static description of a result code. */
const char* braidGetErrorString(braidResult_t result);

/* The last error's message on this thread for `comm` (or for calls without a valid
 * communicator when comm is NULL). Empty string when there is none. */
const char* braidGetLastError(braidComm_t comm);

/* recvbuff[i] = op over all ranks of sendbuff[i]. In place when sendbuff == recvbuff. */
braidResult_t braidAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                             braidDataType_t datatype, braidRedOp_t op, braidComm_t comm,
                             braidStream_t stream);

/* recvbuff = root's sendbuff on every rank. sendbuff is read on the root only. In place
 * when sendbuff == recvbuff. */
braidResult_t braidBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                             braidDataType_t datatype, int root, braidComm_t comm,
                             braidStream_t stream);

/* ---- more collectives. Counts are in elements. "Per rank" buffers hold nranks blocks of
 * `count` elements, block i for/from rank i. */

/* recvbuff (read on root only) = op over all ranks of sendbuff. */
braidResult_t braidReduce(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype,
                          braidRedOp_t op, int root, braidComm_t comm, braidStream_t stream);

/* recvbuff (nranks*sendcount) = every rank's sendbuff, in rank order. In place when
 * sendbuff == recvbuff + rank*sendcount. */
braidResult_t braidAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, braidDataType_t datatype,
                             braidComm_t comm, braidStream_t stream);

/* recvbuff (recvcount) = op over all ranks of block `rank` of sendbuff (nranks*recvcount).
 * In place when recvbuff == sendbuff + rank*recvcount. */
braidResult_t braidReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, braidDataType_t datatype,
                                 braidRedOp_t op, braidComm_t comm, braidStream_t stream);

/* Block j of rank i's sendbuff lands in block i of rank j's recvbuff; `count` per block.
 * In place when sendbuff == recvbuff. */
braidResult_t braidAllToAll(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype,
                            braidComm_t comm, braidStream_t stream);

/* Root's recvbuff (nranks*count) = every rank's sendbuff (count), in rank order. */
braidResult_t braidGather(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype, int root,
                          braidComm_t comm, braidStream_t stream);

/* Every rank's recvbuff (count) = block `rank` of root's sendbuff (nranks*count). */
braidResult_t braidScatter(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype, int root,
                           braidComm_t comm, braidStream_t stream);

/* Rank i's sendbuff (sendcount == recvcounts[i]) lands at recvbuff + displs[i] on every rank.
 * recvcounts must be the same on every rank. */
braidResult_t braidAllGatherV(const void* sendbuff, size_t sendcount, void* recvbuff, const size_t* recvcounts,
                              const size_t* displs, braidDataType_t datatype, braidComm_t comm,
                              braidStream_t stream);

/* sendbuff holds nranks consecutive blocks of recvcounts[i] elements; rank i receives op over
 * all ranks of block i. recvcounts must be the same on every rank. */
braidResult_t braidReduceScatterV(const void* sendbuff, void* recvbuff, const size_t* recvcounts,
                                  braidDataType_t datatype, braidRedOp_t op, braidComm_t comm,
                                  braidStream_t stream);

/* sendcounts[j] elements at sendbuff + sdispls[j] go to rank j, and recvcounts[i] elements
 * from rank i land at recvbuff + rdispls[i]; rank i's sendcounts[j] must equal rank j's
 * recvcounts[i]. */
braidResult_t braidAllToAllV(const void* sendbuff, const size_t* sendcounts, const size_t* sdispls, void* recvbuff,
                             const size_t* recvcounts, const size_t* rdispls, braidDataType_t datatype,
                             braidComm_t comm, braidStream_t stream);

/* Returns once every rank has entered the barrier. */
braidResult_t braidBarrier(braidComm_t comm);

/* Point to point. Sends and receives between a pair of ranks match in issue order and must
 * agree on count and type. Outside a group each call blocks until its buffer may be reused;
 * two ranks that send to each other must group their calls (braidGroupStart/End). */
braidResult_t braidSend(const void* sendbuff, size_t count, braidDataType_t datatype, int peer, braidComm_t comm,
                        braidStream_t stream);
braidResult_t braidRecv(void* recvbuff, size_t count, braidDataType_t datatype, int peer, braidComm_t comm,
                        braidStream_t stream);

/* Calls between braidGroupStart and braidGroupEnd on this thread are only recorded; at the
 * outermost braidGroupEnd the collectives run in the order issued, then all sends and
 * receives run together, each going on as its peer allows whatever the others wait for (as
 * nonblocking sends and receives completed together): a group in which every rank sends to
 * and receives from any set of peers cannot deadlock, nor one whose peers take its messages
 * in calls of their own, in issue order. A receive may use the buffer a send of the same
 * group sends from (in place): it waits for those bytes to go. Groups nest; buffers must
 * stay valid until braidGroupEnd returns. Errors of recorded calls are returned by
 * braidGroupEnd. */
braidResult_t braidGroupStart(void);
braidResult_t braidGroupEnd(void);

/* Splits `comm` as MPI_Comm_split: ranks passing the same color form *newcomm, ranked by
 * (key, rank in comm). color BRAID_SPLIT_NOCOLOR gives *newcomm = NULL. Collective over comm;
 * a rank of comm that ended before it joined fails it with braidRemoteError naming that rank
 * (at once on its host, within about 200 ms elsewhere): shrink comm without it first. */
#define BRAID_SPLIT_NOCOLOR (-1)
braidResult_t braidCommSplit(braidComm_t comm, int color, int key, braidComm_t* newcomm);

/* ---- recovery: going on without a failed rank (NCCL 2.27-2.28's revoke and shrink, ULFM's
 * agree). A typical loop: a collective fails (braidRemoteError / braidTimeout naming a
 * rank); every survivor calls braidCommAgree to learn the same set of failed ranks, then
 * braidCommShrink with that set, destroys the old communicator and goes on with the new one. */

/* Revokes `comm` on every rank: pending and later operations fail with braidRevoked, here at
 * once and on the other ranks within about 100 ms of their next wait. Resources stay, so
 * the communicator can still be shrunk or split. Any thread; never blocks on peers. */
braidResult_t braidCommRevoke(braidComm_t comm);

#define BRAID_SHRINK_DEFAULT 0x00 /* pending operations are waited for (they end by the timeout) */
#define BRAID_SHRINK_ABORT 0x01   /* revoke `comm` first: pending operations fail at once */
/* *newcomm = `comm` without the `excludeCount` ranks in `excludeRanks` (ncclCommShrink):
 * every other rank calls it with the same list and gets contiguous ranks in the old order;
 * the excluded ranks do not take part. Works on a failed or revoked communicator (that is
 * what it is for); `comm` stays valid until destroyed. Blocks until the new communicator is
 * wired up or BRAID_TIMEOUT passes; a survivor that dies meanwhile fails it on the others. */
braidResult_t braidCommShrink(braidComm_t comm, const int* excludeRanks, int excludeCount, braidComm_t* newcomm,
                              int flags);

/* Fault-tolerant agreement (MPIX_Comm_agree): *flag becomes the bitwise AND of the flags of
 * every rank that voted, the same on every rank that returns success, even when ranks die
 * during the call. Ranks that died, stalled, were named as failed by an error, or did not
 * vote within twice BRAID_TIMEOUT plus 3 s are counted as failed instead (braidCommGetFailedRanks). A rank
 * counted as failed before it voted gets braidAborted. Works on failed and revoked
 * communicators; collective over the ranks still alive. */
braidResult_t braidCommAgree(braidComm_t comm, int* flag);

/* The ranks the last braidCommAgree on `comm` counted as failed, ascending: the first
 * `capacity` into failedRanks (may be NULL when capacity is 0), their number into *count. */
braidResult_t braidCommGetFailedRanks(braidComm_t comm, int* failedRanks, int capacity, int* count);

/* Growing (NCCL 2.29's ncclCommGrow). One rank of `comm` makes a single-use grow id for a
 * communicator of `newSize` ranks (more than comm's) and shares it with the other ranks of
 * comm (a braidBroadcast of its bytes) and with the new processes (out of band, as a unique
 * id: it carries the job's key). Then every rank of comm calls braidCommGrow(comm, newSize,
 * &growId, -1, &newcomm) and keeps its rank, and each new process calls
 * braidCommGrow(NULL, newSize, &growId, rank, &newcomm) with its own rank in
 * [size of comm, newSize); each new rank is admitted once. All block until the grown
 * communicator is wired up or BRAID_TIMEOUT passes. Needs braid's own store (braidrun,
 * a unique id, BRAID_STORE_ADDR or MASTER_ADDR), which new processes connect to. */
braidResult_t braidCommGetGrowId(braidComm_t comm, int newSize, braidUniqueId* growId);
braidResult_t braidCommGrow(braidComm_t comm, int newSize, const braidUniqueId* growId, int rank,
                            braidComm_t* newcomm);

/* Elastic jobs under braidrun --min-np/--max-np: braidrun starts a replacement for a lost
 * rank, whose braidCommInitFromEnv waits until the running ranks admit it. *waiting is the
 * number of replacements waiting now (a store read; any rank, any time). braidCommGrowJoiners
 * is collective over `comm`: it admits every replacement waiting when rank 0 looks, giving
 * them the ranks after comm's, and returns the grown communicator (NULL when none waited;
 * comm stays valid either way). Ranks usually fold "someone waits" into their per-step
 * braidCommAgree, so that they all grow at the same step. */
braidResult_t braidCommGetJoiners(braidComm_t comm, int* waiting);
braidResult_t braidCommGrowJoiners(braidComm_t comm, braidComm_t* newcomm);

/* How many shrinks and grows lie between `comm` and the communicator its job started with:
 * 0 for one made by init, its parent's plus one for one made by shrink or grow. */
braidResult_t braidCommGetEpoch(braidComm_t comm, int* epoch);

/* Creates a reduction op that multiplies each rank's input by *scalar (of `datatype`) and
 * sums: PyTorch's PREMUL_SUM. Valid for that datatype on `comm` until braidRedOpDestroy. */
braidResult_t braidRedOpCreatePreMulSum(braidRedOp_t* op, void* scalar, braidDataType_t datatype, braidComm_t comm);
braidResult_t braidRedOpDestroy(braidRedOp_t op, braidComm_t comm);

#ifdef __cplusplus
}
#endif

#endif /* BRAID_BRAID_H_ */
