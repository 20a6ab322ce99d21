"""openpilot's modeld math in numpy float32, as DESIGN.md states it: the oracle the captured step is checked with."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from abi.frames import Nv12Geometry, nv12_planes
from packager.modeld.step import StepPlan, zeroed

Model = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


def warp_plane(plane: np.ndarray, tfm: np.ndarray, out_width: int, out_height: int) -> np.ndarray:
    """Nearest-neighbour perspective warp of one (h, w) plane: round half to even, clamp to the plane."""
    m = tfm.astype(np.float32)
    xs = np.arange(out_width, dtype=np.float32)[None, :]
    ys = np.arange(out_height, dtype=np.float32)[:, None]
    sx = m[0, 0] * xs + m[0, 1] * ys + m[0, 2]
    sy = m[1, 0] * xs + m[1, 1] * ys + m[1, 2]
    sw = m[2, 0] * xs + m[2, 1] * ys + m[2, 2]
    h, w = plane.shape
    col = np.clip(np.rint(sx / sw), 0, w - 1).astype(np.int64)
    line = np.clip(np.rint(sy / sw), 0, h - 1).astype(np.int64)
    return plane[line, col]


def half_resolution(tfm: np.ndarray) -> np.ndarray:
    out = tfm.astype(np.float32).copy()
    out[0, 2] *= 0.5
    out[1, 2] *= 0.5
    out[2, 0] *= 2.0
    out[2, 1] *= 2.0
    return out


def model_frame(buf: np.ndarray, tfm: np.ndarray, geom: Nv12Geometry) -> np.ndarray:
    """The (6, 128, 256) model frame of one NV12 buffer."""
    y_plane, u_plane, v_plane = nv12_planes(buf, geom)
    y = warp_plane(y_plane, tfm, 512, 256)
    half = half_resolution(tfm)
    u = warp_plane(u_plane, half, 256, 128)
    v = warp_plane(v_plane, half, 256, 128)
    return np.stack([y[0::2, 0::2], y[1::2, 0::2], y[0::2, 1::2], y[1::2, 1::2], u, v])


class ReferenceStep:
    """The modeld step in numpy: frame, feature and desire queues, oldest first, updated as DESIGN.md says."""

    def __init__(self, plan: StepPlan, vision: Model, policy: Model | None) -> None:
        self.plan, self.vision, self.policy = plan, vision, policy
        self.queues = {q.name: zeroed(q) for q in plan.queues}

    @staticmethod
    def _push(queue: np.ndarray, item: np.ndarray) -> np.ndarray:
        return np.concatenate([queue[1:], item.reshape(1, *queue.shape[1:])])

    def push_frames(self, inputs: dict[str, np.ndarray]) -> None:
        """Warp both camera buffers and push the frames on their queues (what ``prepare`` does)."""
        for cam, (frame, tfm) in (("road", ("frame", "tfm")), ("wide", ("big_frame", "big_tfm"))):
            if f"{cam}_frames" in self.queues:
                new = model_frame(inputs[frame], inputs[tfm], self.plan.geometry[cam])
                self.queues[f"{cam}_frames"] = self._push(self.queues[f"{cam}_frames"], new)

    def imgs(self) -> dict[str, np.ndarray]:
        """The model's camera inputs: every ``skip``-th queued frame."""
        return {name: self.queues[f"{cam}_frames"][::skip].reshape(1, n * 6, 128, 256)
                for name, (cam, n, skip) in self.plan.camera_inputs.items()}

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One whole call: ``push_frames`` then ``run_models``."""
        self.push_frames(inputs)
        return self.run_models(inputs)

    def run_models(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The rest of a call on the queued frames: the model inputs it built and the models' outputs."""
        plan = self.plan
        imgs = self.imgs()
        skip = plan.history_skip
        self.queues["desires"] = self._push(self.queues["desires"], inputs["desire"])
        desires = self.queues["desires"]
        pulse = desires.reshape(plan.desire_length, skip, plan.desire_width).max(axis=1)[None]
        per_frame = {n: inputs[n] for n in plan.passthrough}
        out, a, b = plan.hidden_slice
        if plan.merged:
            features = self.queues["features"][::skip][None]
            fed = {**imgs, "features_buffer": features, "desire_pulse": pulse, **per_frame}
            results = {"model": self.vision(fed)}
            hidden = results["model"][out].reshape(-1)[a:b]
            self.queues["features"] = self._push(self.queues["features"], hidden.astype(np.float32))
            return {"model": fed, **results}
        vis = self.vision(imgs)
        self.queues["features"] = self._push(self.queues["features"], vis[out].reshape(-1)[a:b])
        fed = {"features_buffer": self.queues["features"][::skip][None], "desire_pulse": pulse, **per_frame}
        assert self.policy is not None
        return {"vision_in": imgs, "policy_in": fed, "vision": vis, "policy": self.policy(fed)}
