"""Scheduling: a tensor-level UOp graph becomes kernels, buffers and a memory plan.

Enters: the UOp graph of the Tensors to compute. Leaves: ``kernels`` splits it into kernels (elementwise
work fused into reduces, breaks at reduces and copies), ``lower`` turns each kernel into a
LOAD/ALU/REDUCE/STORE graph over RANGEs, ``memory_plan`` places intermediate buffers in one arena,
``streams`` finds independent kernel groups a CPU replay can run side by side.
"""
