/*
 * Force-included into the libtiers-mbc sources when they are compiled into
 * libtiers-mbc-mpi: their own MPI calls (window setup, the collectives of
 * create/destroy, RMA) go to the PMPI_ names, so that a tracer preloaded
 * before this library (`tiers trace`) records only the program's calls.
 * Where libtiers-mbc-mpi defines the PMPI_ name itself, its re-entry guard
 * hands the call straight to the MPI library.
 */
#ifndef TIERS_MBCMPI_PMPI_REDIRECT_H
#define TIERS_MBCMPI_PMPI_REDIRECT_H
#define MPI_Accumulate PMPI_Accumulate
#define MPI_Allgather PMPI_Allgather
#define MPI_Allreduce PMPI_Allreduce
#define MPI_Barrier PMPI_Barrier
#define MPI_Comm_dup PMPI_Comm_dup
#define MPI_Comm_free PMPI_Comm_free
#define MPI_Comm_rank PMPI_Comm_rank
#define MPI_Comm_set_errhandler PMPI_Comm_set_errhandler
#define MPI_Comm_size PMPI_Comm_size
#define MPI_Comm_split_type PMPI_Comm_split_type
#define MPI_Error_string PMPI_Error_string
#define MPI_Fetch_and_op PMPI_Fetch_and_op
#define MPI_Ibarrier PMPI_Ibarrier
#define MPI_Info_create PMPI_Info_create
#define MPI_Info_free PMPI_Info_free
#define MPI_Info_set PMPI_Info_set
#define MPI_Initialized PMPI_Initialized
#define MPI_Iprobe PMPI_Iprobe
#define MPI_Put PMPI_Put
#define MPI_Test PMPI_Test
#define MPI_Win_allocate PMPI_Win_allocate
#define MPI_Win_allocate_shared PMPI_Win_allocate_shared
#define MPI_Win_flush PMPI_Win_flush
#define MPI_Win_free PMPI_Win_free
#define MPI_Win_lock_all PMPI_Win_lock_all
#define MPI_Win_shared_query PMPI_Win_shared_query
#define MPI_Win_sync PMPI_Win_sync
#define MPI_Win_unlock_all PMPI_Win_unlock_all
#endif
