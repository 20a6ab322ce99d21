"""Kernel sources for the warmers' tests of teams (targets/cstyle/chains.py ``render_team``): a team whose wait ends
only where its counters start at zero, and a kernel that leaves counters no chunk can be claimed from and nothing
done, as a scratch buffer may hold them."""

TEAM = """__kernel void team(__global float* restrict data0, __global int* restrict data1) {
  for (int dp_t = 0; dp_t < 2; dp_t++) {
    int dp_c = min(max(atomic_inc(data1 + 0), 0), 2);
    int dp_lo = min(dp_c * 32, 64);
    int dp_hi = min(dp_lo + 32, 64);
    for (int i = dp_lo; i < dp_hi; i++) data0[i] = 1.0f;
    atomic_add(data1 + 1, dp_hi - dp_lo);
  }
  while (atomic_add(data1 + 1, 0) < 64) {}
  if (atomic_inc(data1 + 2) == (int)get_num_groups(0) - 1) {
    for (int dp_k = 0; dp_k < 3; dp_k++) data1[dp_k] = 0;
  }
}
"""
SPOIL = """__kernel void spoil(__global float* restrict data0, __global int* restrict data1) {
  data1[0] = 1000;
  data1[1] = 0;
}
"""
BUFFER_BYTES = (256, 12)
