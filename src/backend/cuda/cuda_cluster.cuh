/* Thread-block clusters (sm_90) for the attention kernels, whose ranks split one row's runs and
 * merge through distributed shared memory (internal header): the cluster barrier and a pointer to
 * the same shared variable in another rank. The CPU emulator (tools/cuda/emu) runs one CTA at a
 * time and has no clusters, so its launchers never split (a cluster of one): there the barrier is
 * the block's and every rank is this one. */
#ifndef DI_CUDA_CLUSTER_CUH
#define DI_CUDA_CLUSTER_CUH

#include "backend/cuda/cuda_common.cuh" /* the runtime, or the emulator's (DI_CUDA_EMU_H) */

#ifdef DI_CUDA_EMU_H
static void di_cluster_sync(void) { __syncthreads(); }
template <class T>
static T *di_cluster_rank_smem(T *p, int) { return p; }
#else
#include <cooperative_groups.h>
static __device__ __forceinline__ void di_cluster_sync(void) { cooperative_groups::this_cluster().sync(); }
template <class T>
static __device__ __forceinline__ T *di_cluster_rank_smem(T *p, int rank) {
    return cooperative_groups::this_cluster().map_shared_rank(p, rank);
}
#endif

#endif
