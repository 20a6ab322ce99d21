"""What every stage and the runtime share: typed errors, dtypes, run settings.

Enters: nothing (these modules import only numpy, ml_dtypes and each other).
Leaves: ``errors`` (the DrivepackError family), ``dtype`` (DType, the ``dtypes`` table, the promotion lattice,
numpy conversions), ``helpers`` (DEBUG/NOOPT/BEAM/... settings and ``Context``). The runtime (load, check,
replay) may import these and nothing else of ``jit``.
"""
