"""The openpilot modeld step as one captured function: NV12 camera buffers in, warp, frame and history queues
kept as device state, vision and policy, sliced outputs out (DESIGN.md, "The modeld step")."""
