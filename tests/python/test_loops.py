"""The loops people train in (issue 46): a model wrapped by
`echo_torch.optimize` is the model to its callers, inside Hugging Face's
Trainer at its default TrainingArguments and inside Accelerate, in both
orders, and
Lightning (a LightningModule whose model is wrapped, Trainer.fit).

Each loop runs twice from the same weights and data, with the plain model
and with the wrapped one: the losses step by step are the same (within
1e-4 relative), the parameters after training are the same, and the
training steps ran planned. The data are variable-length sequences padded
to the batch's longest, labels -100 on the padding (and a padding-free
batch of packed sequences for Llama). Dropout is off, so that both runs
draw nothing. The wrapped model's forward has the model's signature (the
Trainer keeps the columns it names), `generate()` after training returns
the plain model's tokens, and `save_pretrained` + `from_pretrained`
round-trips to the trained state_dict.

Skipped, with the reason, without echod; transformers, accelerate and
lightning must import (make python-venv installs them).
"""
import copy
import inspect
import tempfile
import unittest

import torch

import servers
from echo_torch import optimize, report
from test_models import ECHOD, SKIP_REASON, _log

# Imported, not skipped without: make python-venv installs them (pinned in
# the Makefile), and a loop the suite cannot run is a failure.
import accelerate  # noqa: E402
import lightning  # noqa: E402
import transformers  # noqa: E402

VOCAB = 512


def _models():
    gpt2 = transformers.GPT2Config(vocab_size=VOCAB, n_layer=2, n_embd=64, n_head=4,
                                   n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0,
                                   attn_pdrop=0.0)
    llama = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                                     num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, max_position_embeddings=128)
    return {"gpt2": lambda: transformers.GPT2LMHeadModel(gpt2),
            "llama": lambda: transformers.LlamaForCausalLM(llama)}


def _rows(count=16, seed=0):
    """Sequences of 8 to 32 tokens."""
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(count):
        length = int(torch.randint(8, 33, (1,), generator=generator))
        rows.append({"input_ids": torch.randint(1, VOCAB, (length,), generator=generator)})
    return rows


def _padded(rows):
    """Padded to the longest: attention_mask 0 and labels -100 there."""
    length = max(len(r["input_ids"]) for r in rows)
    ids = torch.zeros(len(rows), length, dtype=torch.long)
    mask = torch.zeros(len(rows), length, dtype=torch.long)
    labels = torch.full((len(rows), length), -100)
    for i, row in enumerate(rows):
        n = len(row["input_ids"])
        ids[i, :n], mask[i, :n], labels[i, :n] = row["input_ids"], 1, row["input_ids"]
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


class _Losses(transformers.TrainerCallback):
    def __init__(self):
        self.losses = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.losses.append(logs["loss"])


@unittest.skipIf(ECHOD is None, SKIP_REASON)
class LoopsTest(servers.SharedEchod, unittest.TestCase):
    def _wrap(self, model):
        return optimize(model, server=self.echod.address, plan_cache=False, on_error="raise")

    def _assert_same(self, plain_losses, losses, plain, model):
        self.assertEqual(len(losses), len(plain_losses))
        for got, want in zip(losses, plain_losses):
            self.assertLess(abs(got / want - 1), 1e-4, (losses, plain_losses))
        for got, want in zip(model.parameters(), plain.parameters()):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)

    def _train(self, model, collator, out, **arguments):
        args = transformers.TrainingArguments(output_dir=out, max_steps=6, logging_steps=1,
                                              report_to="none", per_device_train_batch_size=2,
                                              **arguments)
        losses = _Losses()
        trainer = transformers.Trainer(
            model=model, args=args, train_dataset=_rows(), data_collator=collator,
            eval_dataset=_rows(4, seed=1) if "eval_strategy" in arguments else None,
            callbacks=[losses])
        trainer.train()
        return losses.losses, trainer

    def test_trainer_at_its_defaults(self):
        flattening = transformers.DataCollatorWithFlattening(return_position_ids=True)
        cases = [("gpt2", _padded, {}), ("llama", _padded, {}),
                 ("gpt2", _padded, {"gradient_accumulation_steps": 2,
                                    "eval_strategy": "steps", "eval_steps": 3}),
                 ("llama", flattening, {})]
        for name, collator, arguments in cases:
            batches = getattr(collator, "__name__", "padding-free")
            with self.subTest(name, batches=batches, **arguments), \
                    tempfile.TemporaryDirectory() as out:
                torch.manual_seed(0)
                base = _models()[name]()
                plain = copy.deepcopy(base)
                plain_losses, plain_trainer = self._train(plain, collator, out, **arguments)
                model = copy.deepcopy(base)
                wrapped = self._wrap(model)
                losses, trainer = self._train(wrapped, collator, out, **arguments)
                _log(f"[trainer {name}, {batches} {arguments}] plain {plain_losses}, "
                     f"Echo {losses}")
                self._assert_same(plain_losses, losses, plain, model)
                rep = report(wrapped)
                self.assertIsNone(wrapped.fallback_reason)
                self.assertTrue(rep.planned)
                self.assertEqual(trainer.model_accepts_loss_kwargs,
                                 plain_trainer.model_accepts_loss_kwargs)

    def test_the_wrapper_is_the_model_to_its_callers(self):
        for name in ("gpt2", "llama"):
            with self.subTest(name), tempfile.TemporaryDirectory() as out:
                torch.manual_seed(0)
                base = _models()[name]()
                plain = copy.deepcopy(base)
                self._train(plain, _padded, out)
                model = copy.deepcopy(base)
                wrapped = self._wrap(model)
                self._train(wrapped, _padded, out)
                self.assertEqual(inspect.signature(wrapped.forward),
                                 inspect.signature(model.forward))
                self.assertIsInstance(wrapped, type(model))
                self.assertIs(wrapped.config, model.config)
                self.assertEqual(wrapped.device, model.device)
                prompt = torch.randint(1, VOCAB, (1, 6))
                tokens = wrapped.generate(prompt, max_new_tokens=6, do_sample=False)
                self.assertEqual(tokens.tolist(), plain.generate(
                    prompt, max_new_tokens=6, do_sample=False).tolist())
                wrapped.save_pretrained(out + "/saved")
                loaded = type(model).from_pretrained(out + "/saved")
                for key, value in model.state_dict().items():
                    torch.testing.assert_close(loaded.state_dict()[key], value, rtol=0, atol=0)

    def test_accelerate_in_both_orders(self):
        def run(model, order):
            accelerator = accelerate.Accelerator(cpu=True)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
            loader = torch.utils.data.DataLoader(_rows(12), batch_size=2, collate_fn=_padded)
            if order == "wrap, then prepare":
                forward = self._wrap(model)
                forward, optimizer, loader = accelerator.prepare(forward, optimizer, loader)
            elif order == "prepare, then wrap":
                prepared, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                forward = self._wrap(prepared)
            else:
                forward, optimizer, loader = accelerator.prepare(model, optimizer, loader)
            losses = []
            for batch in loader:
                loss = forward(**batch).loss
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                losses.append(loss.item())
            return losses, forward

        torch.manual_seed(0)
        base = _models()["gpt2"]()
        plain = copy.deepcopy(base)
        plain_losses, _ = run(plain, "plain")
        for order in ("wrap, then prepare", "prepare, then wrap"):
            with self.subTest(order):
                model = copy.deepcopy(base)
                losses, forward = run(model, order)
                _log(f"[accelerate, {order}] plain {plain_losses}, Echo {losses}")
                self._assert_same(plain_losses, losses, plain, model)
                wrapped = forward if hasattr(forward, "fallback_reason") else None
                if wrapped is not None:
                    self.assertTrue(report(wrapped).planned)

    def test_lightning_module_whose_model_is_wrapped(self):
        class Module(lightning.LightningModule):
            def __init__(self, model):
                super().__init__()
                self.model = model
                self.losses = []

            def training_step(self, batch, _index):
                loss = self.model(**batch).loss
                self.losses.append(loss.item())
                return loss

            def configure_optimizers(self):
                return torch.optim.AdamW(self.parameters(), lr=1e-3)

        def fit(model):
            module = Module(model)
            lightning.Trainer(max_steps=6, accelerator="cpu", devices=1, logger=False,
                              enable_checkpointing=False, enable_progress_bar=False,
                              enable_model_summary=False).fit(
                module, torch.utils.data.DataLoader(_rows(12), batch_size=2,
                                                    collate_fn=_padded))
            return module.losses

        torch.manual_seed(0)
        base = _models()["llama"]()
        plain = copy.deepcopy(base)
        plain_losses = fit(plain)
        model = copy.deepcopy(base)
        wrapped = self._wrap(model)
        losses = fit(wrapped)
        _log(f"[lightning] plain {plain_losses}, Echo {losses}")
        self._assert_same(plain_losses, losses, plain, model)
        self.assertTrue(report(wrapped).planned)


if __name__ == "__main__":
    unittest.main()
