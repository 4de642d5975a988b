"""Relational models from Python (python/neargnn/hetero.py) on a generated heterogeneous graph:
training lowers the loss and beats chance, the parameters are the same bits for 1 and 2
threads, and bad options are refused with the library's message."""

import ctypes
import os
import shutil
import tempfile
import unittest

import numpy as np

import neargnn as ng

TMP = tempfile.mkdtemp(prefix="neargnn-py-hetero-")
DATA = os.path.join(TMP, "h")


def setUpModule():
    ng.generate_hetero(DATA, "paper:2000:16,author:3000:0,venue:20:0",
                       "author:writes:paper:3,paper:written_by:author:2,paper:cites:paper:4,"
                       "venue:hosts:paper:1", classes=4, homophily=0.8, noise=1.0, seed=3)


def tearDownModule():
    shutil.rmtree(TMP, ignore_errors=True)


class HeteroTest(unittest.TestCase):
    def train(self, model, threads, epochs=8):
        with ng.HeteroDataset(DATA) as ds:
            with ng.HeteroTrainer(ds, model=model, hidden=16, fanouts=[5, 5], batch_size=64,
                                  seed=2, threads=threads) as t:
                losses = [t.epoch()["loss"] for _ in range(epochs)]
                acc, _ = t.evaluate("test")
                return losses, acc, t.params()

    def test_rgcn_trains_and_is_deterministic(self):
        losses, acc, p1 = self.train("rgcn", 1)
        _, _, p2 = self.train("rgcn", 2)
        self.assertLess(losses[-1], losses[0])
        self.assertGreater(acc, 0.6)  # 4 classes: chance is 0.25
        self.assertTrue(np.array_equal(p1, p2))

    def test_rsage_trains(self):
        losses, acc, _ = self.train("rsage", 0)
        self.assertLess(losses[-1], losses[0])
        self.assertGreater(acc, 0.6)

    def test_rgat_trains_and_is_deterministic(self):
        losses, acc, p1 = self.train("rgat", 1)
        _, _, p2 = self.train("rgat", 2)
        self.assertLess(losses[-1], losses[0])
        self.assertGreater(acc, 0.6)
        self.assertTrue(np.array_equal(p1, p2))

    def test_refusals(self):
        with ng.HeteroDataset(DATA) as ds:
            with self.assertRaisesRegex(ValueError, "rgcn, rsage, rgat"):
                ng.HeteroTrainer(ds, model="rgin")
            with self.assertRaisesRegex(ng.NeargnnError, "layers 0"):
                ng.HeteroTrainer(ds, layers=0, fanouts=[])

    def test_defaults_come_from_the_library(self):
        o = ng.hetero.default_train_opts()
        # The initializer filled the whole mirror: its size is the C struct's.
        self.assertEqual(o.size, ctypes.sizeof(ng.hetero.HeteroTrainOpts))
        # NG_HETERO_TRAIN_OPTS_INIT's values (a sample), which Python does not repeat.
        self.assertEqual((o.layers, o.hidden, o.batch_size, o.eval_batch, o.seed, o.bases),
                         (2, 64, 256, 1024, 1, 0))
        self.assertAlmostEqual(o.lr, 0.01)
        self.assertAlmostEqual(o.dropout, 0.5)
        with ng.HeteroDataset(DATA) as ds:
            with self.assertRaisesRegex(TypeError, "unknown option.*hiden"):
                ng.HeteroTrainer(ds, hiden=8)

    def test_bases(self):
        """R-GCN with its basis decomposition trains, and has fewer parameters."""
        with ng.HeteroDataset(DATA) as ds:
            with ng.HeteroTrainer(ds, hidden=16, fanouts=[5, 5], batch_size=64, seed=2) as t:
                full = t.params().size
            with ng.HeteroTrainer(ds, hidden=16, fanouts=[5, 5], batch_size=64, seed=2,
                                  bases=2) as t:
                losses = [t.epoch()["loss"] for _ in range(8)]
                acc, _ = t.evaluate("test")
                self.assertLess(t.params().size, full)
        self.assertLess(losses[-1], losses[0])
        self.assertGreater(acc, 0.6)

    def test_checkpoint(self):
        """save, load_weights into a trainer of another seed: the same logits bits."""
        path = os.path.join(TMP, "h.ckpt")
        ids = np.arange(0, 2000, 7)
        with ng.HeteroDataset(DATA) as ds:
            self.assertEqual(ds.classes, 4)
            with ng.HeteroTrainer(ds, model="rgat", hidden=8, heads=2, fanouts=[3, 3],
                                  batch_size=64, seed=2) as a:
                a.epoch()
                a.save(path)
                la = a.predict(ids)
            with ng.HeteroTrainer(ds, model="rgat", hidden=8, heads=2, fanouts=[3, 3],
                                  seed=5) as b:
                self.assertFalse(np.array_equal(b.predict(ids), la))
                b.load_weights(path)
                self.assertTrue(np.array_equal(b.predict(ids), la))
                self.assertEqual(la.shape, (ids.size, 4))
            with ng.HeteroTrainer(ds, model="rgat", hidden=16, heads=2) as c:
                with self.assertRaisesRegex(ng.NeargnnError, "--hidden"):
                    c.load_weights(path)

    def test_dataset_outlives_its_trainer(self):
        ds = ng.HeteroDataset(DATA)
        t = ng.HeteroTrainer(ds, hidden=8, fanouts=[3, 3], batch_size=64)
        with self.assertRaisesRegex(ng.NeargnnError, "close it first"):
            ds.close()
        t.close()
        ds.close()


if __name__ == "__main__":
    unittest.main()
