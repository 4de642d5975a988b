"""The evaluation harness's workload presets (docs/eval.md).

A workload names the graph the harness generates (nodes, average degree, feature width) and the
training it runs on it (fanouts, batch, hidden width, hot-tier share). Its `iters` is the number
of iterations per epoch the harness aims at: the training split is chosen as iters * batch of the
nodes when the dataset is generated, so one epoch is about that many iterations.
"""

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Workload:
    name: str
    title: str  # one line for the report
    nodes: int
    dim: int
    fanouts: str  # from the targets outwards, as `neargnn train --fanouts`
    batch: int
    cache_ratio: float  # hot rows as a share of the nodes
    iters: int  # iterations per epoch aimed at
    avg_degree: float = 16.0
    hidden: int = 256
    seed: int = 3

    @property
    def row_bytes(self) -> int:
        return self.dim * 4

    @property
    def feature_bytes(self) -> int:
        return self.nodes * self.row_bytes

    @property
    def train_fraction(self) -> float:
        """The training split's share that makes one epoch about `iters` iterations (at most 1)."""
        return min(1.0, self.iters * self.batch / self.nodes)

    @property
    def hops(self) -> int:
        return len(self.fanouts.split(","))

    def data_key(self) -> str:
        """Names the dataset folder: everything the generated graph depends on."""
        return (f"{self.name}-n{self.nodes}-deg{self.avg_degree:g}-d{self.dim}"
                f"-t{self.train_fraction:.6g}-s{self.seed}")


PRESETS = {
    # The paper's 1-hop setting: fetch-bound, 4 KB rows (the hybrid's best case).
    "W1": Workload("W1", "1-hop, fanout 10, batch 1000, 1024-d, hot tier 4%",
                   nodes=4_000_000, dim=1024, fanouts="10", batch=1000, cache_ratio=0.04,
                   iters=600),
    # Deep sampling, small rows: many cold rows per iteration, each too small for zero-copy.
    "W2": Workload("W2", "3-hop, fanouts 12,12,12, batch 1024, 128-d, hot tier 10%",
                   nodes=4_000_000, dim=128, fanouts="12,12,12", batch=1024, cache_ratio=0.10,
                   iters=100),
    # GraphSAGE's usual 2-hop setting, medium rows.
    "W3": Workload("W3", "2-hop, fanouts 25,10, batch 1024, 256-d, hot tier 5%",
                   nodes=4_000_000, dim=256, fanouts="25,10", batch=1024, cache_ratio=0.05,
                   iters=200),
    # A few seconds on two cores: the CI smoke run (tests/cli_harness.sh).
    "tiny": Workload("tiny", "2-hop, fanouts 10,5, batch 100, 64-d, hot tier 10% (smoke test)",
                     nodes=20_000, dim=64, fanouts="10,5", batch=100, cache_ratio=0.10,
                     iters=25, hidden=32),
}


def resolve(name: str, scale: float = 1.0, nodes: int = 0, iters: int = 0) -> Workload:
    """The preset `name`, its nodes multiplied by `scale` (or replaced by `nodes`) and its
    iterations per epoch replaced by `iters` when given."""
    if name not in PRESETS:
        raise KeyError(f"unknown workload '{name}' (known: {', '.join(PRESETS)})")
    w = PRESETS[name]
    n = nodes if nodes > 0 else max(2, int(round(w.nodes * scale)))
    return replace(w, nodes=n, iters=iters if iters > 0 else w.iters)
