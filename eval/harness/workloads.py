"""The evaluation harness's workload presets (docs/eval.md).

A workload names the graph the harness generates (nodes, average degree, feature width) and the
training it runs on it (fanouts, batch, hidden width, hot-tier share). Its `iters` is the number
of iterations per epoch the harness aims at: the training split is chosen as iters * batch of the
nodes when the dataset is generated, so one epoch is about that many iterations. A workload with an
explicit `train` share (W4: 1% of the nodes, as papers100M) keeps that share instead, whatever its
scale; its `iters` is then only the full-scale figure it comes to. `run.py --iters` replaces an
explicit share by iters * batch again.
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
    classes: int = 16  # `neargnn generate --classes` (16 is its default)
    train: float = 0.0  # the training split's share of the nodes; 0: iters * batch / nodes

    @property
    def row_bytes(self) -> int:
        return self.dim * 4

    @property
    def feature_bytes(self) -> int:
        return self.nodes * self.row_bytes

    @property
    def train_fraction(self) -> float:
        """The explicit `train` share, else the share that makes one epoch about `iters`
        iterations (at most 1)."""
        if self.train > 0:
            return min(1.0, self.train)
        return min(1.0, self.iters * self.batch / self.nodes)

    @property
    def hops(self) -> int:
        return len(self.fanouts.split(","))

    def data_key(self) -> str:
        """Names the dataset folder: everything the generated graph depends on (the classes only
        when not the generator's default 16, so that the earlier presets keep their folders)."""
        classes = f"-c{self.classes}" if self.classes != 16 else ""
        return (f"{self.name}-n{self.nodes}-deg{self.avg_degree:g}-d{self.dim}"
                f"-t{self.train_fraction:.6g}{classes}-s{self.seed}")


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
    # papers100M-shaped (ogbn-papers100M: 111 M nodes, 128-d, 172 classes, train 1%), at 16 M
    # nodes: 3-hop GraphSAGE-mean over small rows, the training split 1% of the nodes (160 k
    # targets, 157 iterations per epoch at full scale), 32 classes; 8 GiB of features.
    "W4": Workload("W4", "papers100M-shaped: 3-hop, fanouts 15,10,5, batch 1024, 128-d, "
                   "32 classes, train 1%, hot tier 5%",
                   nodes=16_000_000, dim=128, fanouts="15,10,5", batch=1024, cache_ratio=0.05,
                   iters=157, avg_degree=15.0, classes=32, train=0.01),
    # A few seconds on two cores: the CI smoke run (tests/cli_harness.sh).
    "tiny": Workload("tiny", "2-hop, fanouts 10,5, batch 100, 64-d, hot tier 10% (smoke test)",
                     nodes=20_000, dim=64, fanouts="10,5", batch=100, cache_ratio=0.10,
                     iters=25, hidden=32),
}


def resolve(name: str, scale: float = 1.0, nodes: int = 0, iters: int = 0) -> Workload:
    """The preset `name`, its nodes multiplied by `scale` (or replaced by `nodes`) and its
    iterations per epoch replaced by `iters` when given (which also drops an explicit training
    share: the split is then iters * batch of the nodes)."""
    if name not in PRESETS:
        raise KeyError(f"unknown workload '{name}' (known: {', '.join(PRESETS)})")
    w = PRESETS[name]
    n = nodes if nodes > 0 else max(2, int(round(w.nodes * scale)))
    if iters > 0:
        return replace(w, nodes=n, iters=iters, train=0.0)
    return replace(w, nodes=n)


# ---- link prediction (run_link.py) ----

@dataclass(frozen=True)
class LinkWorkload(Workload):
    """A link-prediction workload: Workload's graph and model fields (its `iters` are
    mini-batches per epoch, `--epoch-iters`, and its `batch` positive edges per mini-batch), a
    graph from `neargnn generate --links`, `held_out` of its edges split off as the test edges with
    `eval_neg` fixed negatives each (the MRR protocol of ogbl-citation2), and `train --task link`
    on the rest with `neg_per_pos` uniform negatives per positive at learning rate `lr`. An epoch is
    capped at `iters` mini-batches: a full epoch of a 16 M-node graph is 230 k of them."""
    communities: int = 0  # generate --communities; 0: one per 256 nodes
    held_out: float = 0.01  # split-edges --test
    eval_neg: int = 100  # split-edges --neg-per-pos: fixed negatives per test edge
    neg_per_pos: int = 1  # training negatives per positive (uniform)
    lr: float = 0.003  # the recipe's learning rate (docs/link-prediction.md, "L4's recipe")

    def data_key(self) -> str:
        return (f"{self.name}-links-n{self.nodes}-deg{self.avg_degree:g}-d{self.dim}"
                f"-c{self.classes}-k{self.communities}-s{self.seed}"
                f"-test{self.held_out:g}x{self.eval_neg}")


LINK_PRESETS = {
    # W4's graph (16 M nodes, degree 15, 128-d, 32 classes) with planted communities; 1% of the
    # edges held out with 100 negatives each; batch 1024 positives + 1 uniform negative each,
    # 3-hop 15,10,5, hidden 256, hot tier 5% (issue 39's L4). lr 0.001: at 0.003 the 3 layers
    # of 256 collapse to a constant embedding on generated features (docs/link-prediction.md,
    # "L4's recipe").
    "L4": LinkWorkload("L4", "W4's graph with --links: 1% of edges held out, batch 1024 "
                       "positives + 1 uniform negative, 3-hop 15,10,5, hidden 256, hot tier 5%",
                       nodes=16_000_000, dim=128, fanouts="15,10,5", batch=1024,
                       cache_ratio=0.05, iters=200, avg_degree=15.0, classes=32, lr=0.001),
    # Seconds on two cores: the CI smoke run of run_link.py (tests/cli_harness_link.sh).
    "ltiny": LinkWorkload("ltiny", "L4's shape at 20 k nodes, 2-hop 10,5, batch 256, 32-d "
                          "(smoke test)", nodes=20_000, dim=32, fanouts="10,5", batch=256,
                          cache_ratio=0.10, iters=8, avg_degree=8.0, hidden=32, classes=4,
                          eval_neg=20),
}


def resolve_link(name: str, scale: float = 1.0, nodes: int = 0, iters: int = 0) -> LinkWorkload:
    """The link preset `name`, its nodes multiplied by `scale` (or replaced by `nodes`) and its
    mini-batches per epoch replaced by `iters` when given."""
    if name not in LINK_PRESETS:
        raise KeyError(f"unknown link workload '{name}' (known: {', '.join(LINK_PRESETS)})")
    w = LINK_PRESETS[name]
    n = nodes if nodes > 0 else max(2, int(round(w.nodes * scale)))
    return replace(w, nodes=n, iters=iters if iters > 0 else w.iters)
