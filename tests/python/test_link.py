"""Link prediction from Python (python/neargnn/link.py) on Cora: the split's counts, a short
link training whose loss bits match the command's, metrics in range, and errors."""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

import neargnn as ng

DATA = os.environ.get("NG_DATA_DIR", os.path.join(os.path.dirname(__file__), "../../../shared/data"))
TMP = tempfile.mkdtemp(prefix="neargnn-py-link-")
CORA = os.path.join(TMP, "cora")


def setUpModule():
    ng.convert(CORA, os.path.join(DATA, "cora"))


def tearDownModule():
    shutil.rmtree(TMP, ignore_errors=True)


class LinkTest(unittest.TestCase):
    def test_split_and_train(self):
        info = ng.split_edges(CORA, val=0.05, test=0.1, neg_per_pos=10, seed=2, undirected=True)
        self.assertEqual((info["train"], info["val"], info["test"]), (4488, 263, 527))
        self.assertEqual(info["neg_per_pos"], 10)
        self.assertEqual(info["neg_source"], "source")
        self.assertEqual(info["mp_edges"], 2 * 4488)
        with ng.Dataset.open(CORA) as ds:
            model = ng.Model.sage(1433, 16, hidden=[32], fanouts=[5, 5], dropout=0.0)
            with ng.LinkTrainer(ds, model, batch=1024, seed=4, threads=2) as t:
                losses = [t.epoch()["loss"] for _ in range(2)]
                m = t.evaluate("test")
            model.close()
        self.assertLess(losses[1], losses[0])
        self.assertTrue(0.5 < m["auc"] <= 1.0 and 0.0 < m["mrr"] <= 1.0, m)
        self.assertTrue(m["hits10"] <= m["hits50"] <= m["hits100"], m)
        self.assertEqual((m["positives"], m["negatives"]), (527, 5270))
        # The command trains the same bits from the same options.
        out = os.path.join(TMP, "link.json")
        subprocess.run([os.environ["NG_BIN"], "train", "--dataset", CORA, "--task", "link",
                        "--model", "sage", "--fanouts", "5,5", "--hidden", "32", "--embed-dim",
                        "16", "--batch", "1024", "--epochs", "2", "--eval-every", "0", "--seed",
                        "4", "--threads", "2", "--json", out, "--progress", "none"],
                       check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            # loss_hex: cJSON writes 15 digits when they read back within an ulp.
            self.assertEqual(float.fromhex(json.load(f)["epochs"][1]["loss_hex"]), losses[1])

    def test_save_and_score(self):
        d = os.path.join(TMP, "cora_ck")
        shutil.copytree(CORA, d)
        ng.split_edges(d, neg_per_pos=1, neg_source="uniform", seed=3)
        ck = os.path.join(TMP, "link.st")
        src, dst = [1, 2, 3, 2707], [5, 1358, 3, 0]
        with ng.Dataset.open(d) as ds:
            model = ng.Model.sage(1433, 8, hidden=[16], fanouts=[5, 5], dropout=0.0)
            with ng.LinkTrainer(ds, model, decoder="mlp", mlp_hidden=4, batch=1024, seed=4,
                                threads=2) as t:
                t.epoch()
                t.save(ck)
                want = t.score(src, dst)
            with ng.LinkTrainer(ds, model, decoder="mlp", mlp_hidden=4, seed=9) as t:
                self.assertNotEqual(t.score(src, dst).tobytes(), want.tobytes())
                t.load_weights(ck)
                self.assertEqual(t.score(src, dst).tobytes(), want.tobytes())
                with self.assertRaises(ValueError):
                    t.score([1, 2], [3])
            with ng.LinkTrainer(ds, model, decoder="dot") as t:
                with self.assertRaises(ng.NeargnnError):
                    t.load_weights(ck)
            model.close()

    def test_epoch_iters(self):
        ng.split_edges(CORA, val=0.05, test=0.1, neg_per_pos=1, seed=2, undirected=True)
        with ng.Dataset.open(CORA) as ds:
            model = ng.Model.sage(1433, 16, hidden=[16], fanouts=[5, 5])
            with ng.LinkTrainer(ds, model, batch=256, epoch_iters=3, threads=2) as t:
                self.assertEqual(t.epoch()["iterations"], 3)  # of 18 without the cap
            model.close()

    def test_errors(self):
        with self.assertRaises(ValueError):
            ng.split_edges(CORA, neg_source="random")
        with self.assertRaises(ng.NeargnnError):
            ng.split_edges(CORA, val=0.6, test=0.5)
        with ng.Dataset.open(CORA) as ds:
            model = ng.Model.sage(1433, 16, hidden=[16], fanouts=[5, 5])
            with self.assertRaises(ValueError):
                ng.LinkTrainer(ds, model, decoder="cosine")
            with self.assertRaises(TypeError):
                ng.LinkTrainer(ds, model, learning_rate=0.1)
            model.close()


if __name__ == "__main__":
    unittest.main()
