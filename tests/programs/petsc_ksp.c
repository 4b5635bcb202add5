/*
 * A PETSc KSP solve for tests/test_mbc_programs.py and bench/mbc_programs:
 * the 5-point Laplacian on an m x m grid (rows split over the ranks),
 * right-hand side A * ones, solved with CG and a Jacobi preconditioner to a
 * relative tolerance of 1e-8.  Prints the iteration count, the converged
 * reason, the residual norm ||b - A x||, the error norm ||x - ones|| and the
 * time of KSPSolve alone (between two barriers).
 * Options: -m M (default 64) and any PETSc option (-ksp_type, -pc_type, ...).
 */
#include <petscksp.h>

int main(int argc, char **argv) {
  Mat A;
  Vec x, b, u, r;
  KSP ksp;
  PC pc;
  PetscInt m = 64, lo, hi, its;
  PetscReal rnorm, enorm;
  KSPConvergedReason reason;

  PetscCall(PetscInitialize(&argc, &argv, NULL, NULL));
  PetscCall(PetscOptionsGetInt(NULL, NULL, "-m", &m, NULL));
  PetscInt n = m * m;

  PetscCall(MatCreate(PETSC_COMM_WORLD, &A));
  PetscCall(MatSetSizes(A, PETSC_DECIDE, PETSC_DECIDE, n, n));
  PetscCall(MatSetFromOptions(A));
  PetscCall(MatMPIAIJSetPreallocation(A, 5, NULL, 2, NULL));
  PetscCall(MatSeqAIJSetPreallocation(A, 5, NULL));
  PetscCall(MatGetOwnershipRange(A, &lo, &hi));
  for (PetscInt row = lo; row < hi; row++) {
    PetscInt i = row / m, j = row % m;
    if (i > 0) PetscCall(MatSetValue(A, row, row - m, -1.0, INSERT_VALUES));
    if (i < m - 1) PetscCall(MatSetValue(A, row, row + m, -1.0, INSERT_VALUES));
    if (j > 0) PetscCall(MatSetValue(A, row, row - 1, -1.0, INSERT_VALUES));
    if (j < m - 1) PetscCall(MatSetValue(A, row, row + 1, -1.0, INSERT_VALUES));
    PetscCall(MatSetValue(A, row, row, 4.0, INSERT_VALUES));
  }
  PetscCall(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY));

  PetscCall(MatCreateVecs(A, &x, &b));
  PetscCall(VecDuplicate(x, &u));
  PetscCall(VecDuplicate(x, &r));
  PetscCall(VecSet(u, 1.0));
  PetscCall(MatMult(A, u, b));

  PetscCall(KSPCreate(PETSC_COMM_WORLD, &ksp));
  PetscCall(KSPSetOperators(ksp, A, A));
  PetscCall(KSPSetType(ksp, KSPCG));
  PetscCall(KSPGetPC(ksp, &pc));
  PetscCall(PCSetType(pc, PCJACOBI));
  PetscCall(KSPSetTolerances(ksp, 1e-8, PETSC_DEFAULT, PETSC_DEFAULT, 10000));
  PetscCall(KSPSetFromOptions(ksp));
  PetscCall(KSPSetUp(ksp));
  PetscCall(MPI_Barrier(PETSC_COMM_WORLD));
  double t0 = MPI_Wtime();
  PetscCall(KSPSolve(ksp, b, x));
  PetscCall(MPI_Barrier(PETSC_COMM_WORLD));
  double t1 = MPI_Wtime();

  PetscCall(KSPGetIterationNumber(ksp, &its));
  PetscCall(KSPGetConvergedReason(ksp, &reason));
  PetscCall(MatMult(A, x, r));
  PetscCall(VecAYPX(r, -1.0, b));
  PetscCall(VecNorm(r, NORM_2, &rnorm));
  PetscCall(VecAXPY(x, -1.0, u));
  PetscCall(VecNorm(x, NORM_2, &enorm));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "iterations %" PetscInt_FMT "\n", its));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "reason %s\n", KSPConvergedReasons[reason]));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "residual norm %.6e\n", (double)rnorm));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "error norm %.6e\n", (double)enorm));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "solve time %.6f s\n", t1 - t0));

  PetscCall(KSPDestroy(&ksp));
  PetscCall(VecDestroy(&x));
  PetscCall(VecDestroy(&b));
  PetscCall(VecDestroy(&u));
  PetscCall(VecDestroy(&r));
  PetscCall(MatDestroy(&A));
  PetscCall(PetscFinalize());
  return 0;
}
