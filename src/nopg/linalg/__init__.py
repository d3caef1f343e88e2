"""The linear algebra of the Bellman systems: row matrices, dense and Krylov solvers,
preconditioners and the solve whose error is proven.
"""
