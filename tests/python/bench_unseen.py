#!/usr/bin/env python3
"""Models the suite does not test, through the one-line hook at its
defaults (issue 19's "models from these libraries that this project has not
seen"): per model, one eager step and one step of
`echo_torch.optimize(model, server=...)` with every other option at its
default (AUTO, 5%), run and measured as bench_users.py measures them
(harness.run_step: parameters, buffers and the batch plus the CPU
allocator's peak). Prints one markdown row per model: whether the hook fell
back, whether the gradients equal eager's (rtol 1e-4, atol 1e-6), the
measured step peak against eager's and against the plan's, the predicted
extra compute and echod's lower bound on the peak.

  build/venv/bin/python tests/python/bench_unseen.py [--models mistral,qwen2,...]
  build/venv-vision/bin/python tests/python/bench_unseen.py --models deit-tiny,mixer-s16,...

transformers (random weights from configs: 2 layers, hidden 64, 4 heads,
FFN 128, vocabulary 4096; batch 4 x 64 tokens; `model(input_ids=x,
labels=x)`): mistral, qwen2 (both 2 key/value heads), gpt-neox, opt,
roberta-mlm, distilbert-mlm. timm (the vision venv; `timm.create_model(name,
num_classes=0)` at its defaults under a 10-class linear head and
cross-entropy; 8 images of --image pixels, default 224): deit-tiny,
mixer-s16, efficientnet-b0, regnetx-002.
"""
import argparse
import sys

import torch

import harness
import servers
import test_third_party
from echo_torch import optimize, report

VOCAB, BATCH, LENGTH = 4096, 4, 64
_SMALL = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
              num_attention_heads=4, vocab_size=VOCAB, max_position_embeddings=LENGTH)


def _language_model(cls_name, config_name, **config):
    import transformers
    model = getattr(transformers, cls_name)(getattr(transformers, config_name)(**config))
    x = torch.randint(0, VOCAB, (BATCH, LENGTH))
    return test_third_party._hf_case(model, input_ids=x, labels=x)


def _image_model(name, image):
    import timm
    body = timm.create_model(name, pretrained=False, num_classes=0)
    model = test_third_party._Classify(body, body.num_features, 10)
    return harness.Case(model.train(),
                        (torch.randn(8, 3, image, image), torch.randint(0, 10, (8,))))


LANGUAGE = {
    "mistral": ("MistralForCausalLM", "MistralConfig", dict(_SMALL, num_key_value_heads=2)),
    "qwen2": ("Qwen2ForCausalLM", "Qwen2Config", dict(_SMALL, num_key_value_heads=2)),
    "gpt-neox": ("GPTNeoXForCausalLM", "GPTNeoXConfig", _SMALL),
    "opt": ("OPTForCausalLM", "OPTConfig",
            dict(num_hidden_layers=2, hidden_size=64, ffn_dim=128, num_attention_heads=4,
                 vocab_size=VOCAB, max_position_embeddings=LENGTH, word_embed_proj_dim=64)),
    "roberta-mlm": ("RobertaForMaskedLM", "RobertaConfig",
                    dict(_SMALL, max_position_embeddings=LENGTH + 2)),
    "distilbert-mlm": ("DistilBertForMaskedLM", "DistilBertConfig",
                       dict(n_layers=2, dim=64, hidden_dim=128, n_heads=4, vocab_size=VOCAB,
                            max_position_embeddings=LENGTH)),
}
IMAGE = {"deit-tiny": "deit_tiny_patch16_224", "mixer-s16": "mixer_s16_224",
         "efficientnet-b0": "efficientnet_b0", "regnetx-002": "regnetx_002"}


def _case(name, image):
    if name in LANGUAGE:
        return _language_model(*LANGUAGE[name][:2], **LANGUAGE[name][2])
    return _image_model(IMAGE[name], image)


def _mib(n):
    return f"{n / 2**20:.2f}" if n else "-"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(LANGUAGE))
    parser.add_argument("--image", type=int, default=224)
    args = parser.parse_args()
    names = args.models.split(",")
    unknown = [n for n in names if n not in LANGUAGE and n not in IMAGE]
    if unknown:
        raise SystemExit(f"unknown models {unknown}; known: {list(LANGUAGE) + list(IMAGE)}")
    torch.set_num_threads(2)
    print(f"torch {torch.__version__}, {BATCH}x{LENGTH} tokens / 8 images of {args.image}px")
    print("| model | fell back | gradients = eager | step peak MiB (eager) | vs eager | "
          "planned MiB | extra compute % | echod's lower bound MiB |")
    print("|---|---|---|---|---|---|---|---|")
    with servers.Echod() as echod:
        for name in names:
            torch.manual_seed(0)
            case = _case(name, args.image)
            eager = case.run(case.model)
            wrapped = optimize(case.model, server=echod.address)
            planned = case.run(wrapped)
            rep = report(wrapped)
            same = all(torch.allclose(got, want, rtol=1e-4, atol=1e-6)
                       for got, want in zip(planned.grads, eager.grads) if want is not None)
            print(f"| {name} | {wrapped.fallback_reason or 'no'} | {'yes' if same else 'NO'} | "
                  f"{_mib(planned.peak_bytes)} ({_mib(eager.peak_bytes)}) | "
                  f"{eager.peak_bytes / planned.peak_bytes:.2f}x | "
                  f"{_mib(rep.planned_peak_bytes if rep else 0)} | "
                  f"{100 * rep.predicted_extra_compute_ratio if rep else 0:.2f} | "
                  f"{_mib(rep.peak_lower_bound_bytes if rep else 0)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
