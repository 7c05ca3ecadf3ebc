"""The model suite, each returning a scalar training loss.

Sizes: PAPER holds the paper's settings; CI holds the scaled-down ones the
tests and the benchmark use (2 CPU cores, whole suite in minutes). Scaling
keeps every structure (explicit LSTM cells, MLP attention over all source
positions at every decoder step, bidirectional recurrence, residual blocks)
and shrinks batch, lengths and widths.
"""
import dataclasses
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class ImageLoss(nn.Module):
    """An image classifier (e.g. timm's) under cross-entropy: the training
    step's loss, for the benchmarks that take third-party image models."""

    def __init__(self, body):
        super().__init__()
        self.body = body

    def forward(self, images, labels):
        return F.cross_entropy(self.body(images), labels)


class LSTMCell(nn.Module):
    """An LSTM cell written out, as in the paper's NMT model."""

    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.ih = nn.Linear(input_size, 4 * hidden_size)
        self.hh = nn.Linear(hidden_size, 4 * hidden_size, bias=False)

    def forward(self, x, state):
        h, c = state
        i, f, g, o = (self.ih(x) + self.hh(h)).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return h, c


def _run_lstm(cell, xs, hidden_size, reverse=False):
    """xs: [T, B, E] -> [T, B, H]."""
    batch = xs.shape[1]
    h = xs.new_zeros(batch, hidden_size)
    c = xs.new_zeros(batch, hidden_size)
    steps = range(xs.shape[0] - 1, -1, -1) if reverse else range(xs.shape[0])
    outs = [None] * xs.shape[0]
    for t in steps:
        h, c = cell(xs[t], (h, c))
        outs[t] = h
    return torch.stack(outs)


@dataclasses.dataclass
class NMTConfig:
    batch: int
    src_len: int
    tgt_len: int
    vocab: int
    embed: int
    hidden: int
    attention: int


NMT_PAPER = NMTConfig(batch=80, src_len=50, tgt_len=50, vocab=30000, embed=500,
                      hidden=1000, attention=512)
NMT_CI = NMTConfig(batch=16, src_len=12, tgt_len=10, vocab=256, embed=64,
                   hidden=128, attention=64)


class NMT(nn.Module):
    """LSTM encoder-decoder with MLP (Bahdanau) attention: at every decoder
    step, score = v . tanh(W_s S + W_q q_t) over all source positions."""

    def __init__(self, cfg: NMTConfig):
        super().__init__()
        self.cfg = cfg
        self.src_embed = nn.Embedding(cfg.vocab, cfg.embed)
        self.tgt_embed = nn.Embedding(cfg.vocab, cfg.embed)
        self.encoder = LSTMCell(cfg.embed, cfg.hidden)
        self.decoder = LSTMCell(cfg.embed + cfg.hidden, cfg.hidden)
        self.w_s = nn.Linear(cfg.hidden, cfg.attention, bias=False)
        self.w_q = nn.Linear(cfg.hidden, cfg.attention)
        self.v = nn.Linear(cfg.attention, 1, bias=False)
        self.out = nn.Linear(2 * cfg.hidden, cfg.vocab)

    def forward(self, src, tgt_in, tgt_out):
        cfg = self.cfg
        enc = _run_lstm(self.encoder, self.src_embed(src), cfg.hidden)  # [S, B, H]
        keys = self.w_s(enc)  # [S, B, A], shared by every decoder step
        emb = self.tgt_embed(tgt_in)  # [T, B, E]
        batch = src.shape[1]
        h = enc.new_zeros(batch, cfg.hidden)
        c = enc.new_zeros(batch, cfg.hidden)
        ctx = enc.new_zeros(batch, cfg.hidden)
        logits = []
        for t in range(tgt_in.shape[0]):
            h, c = self.decoder(torch.cat([emb[t], ctx], dim=-1), (h, c))
            scores = self.v(torch.tanh(keys + self.w_q(h))).squeeze(-1)  # [S, B]
            alpha = torch.softmax(scores, dim=0)
            ctx = (alpha.unsqueeze(-1) * enc).sum(0)
            logits.append(self.out(torch.cat([h, ctx], dim=-1)))
        logits = torch.stack(logits)
        return F.cross_entropy(logits.reshape(-1, cfg.vocab), tgt_out.reshape(-1))

    def example_inputs(self, generator=None):
        cfg = self.cfg
        src = torch.randint(0, cfg.vocab, (cfg.src_len, cfg.batch), generator=generator)
        tgt = torch.randint(0, cfg.vocab, (cfg.tgt_len + 1, cfg.batch), generator=generator)
        return src, tgt[:-1], tgt[1:]


@dataclasses.dataclass
class DS2Config:
    batch: int
    freq: int
    frames: int
    channels: int
    hidden: int
    rnn_layers: int
    classes: int


DS2_PAPER = DS2Config(batch=32, freq=161, frames=700, channels=32, hidden=800,
                      rnn_layers=5, classes=29)
DS2_CI = DS2Config(batch=4, freq=32, frames=48, channels=8, hidden=64,
                   rnn_layers=2, classes=29)


class DeepSpeech2(nn.Module):
    """Conv front end (2 conv + batch norm + hardtanh) over a spectrogram,
    then bidirectional LSTM layers and a per-frame classifier (a per-frame
    cross entropy stands in for CTC)."""

    def __init__(self, cfg: DS2Config):
        super().__init__()
        self.cfg = cfg
        self.conv = nn.Sequential(
            nn.Conv2d(1, cfg.channels, (11, 11), stride=(2, 2), padding=(5, 5), bias=False),
            nn.BatchNorm2d(cfg.channels), nn.Hardtanh(0, 20),
            nn.Conv2d(cfg.channels, cfg.channels, (11, 11), stride=(2, 1), padding=(5, 5),
                      bias=False),
            nn.BatchNorm2d(cfg.channels), nn.Hardtanh(0, 20))
        # Both convs stride 2 over frequency (kernel 11, padding 5): ceil(freq / 2)
        # each, which is freq // 4 only when 4 divides freq (the paper's 161
        # gives 41, not 40).
        feat = cfg.channels * (((cfg.freq + 1) // 2 + 1) // 2)
        self.forward_cells = nn.ModuleList()
        self.backward_cells = nn.ModuleList()
        for layer in range(cfg.rnn_layers):
            size = feat if layer == 0 else 2 * cfg.hidden
            self.forward_cells.append(LSTMCell(size, cfg.hidden))
            self.backward_cells.append(LSTMCell(size, cfg.hidden))
        self.classifier = nn.Linear(2 * cfg.hidden, cfg.classes)

    def forward(self, spect, labels):
        x = self.conv(spect)  # [B, C, F/4, T/2]
        b, c, f, t = x.shape
        x = x.reshape(b, c * f, t).permute(2, 0, 1)  # [T, B, C*F]
        for fwd, bwd in zip(self.forward_cells, self.backward_cells):
            x = torch.cat([_run_lstm(fwd, x, self.cfg.hidden),
                           _run_lstm(bwd, x, self.cfg.hidden, reverse=True)], dim=-1)
        logits = self.classifier(x)  # [T, B, classes]
        return F.cross_entropy(logits.reshape(-1, self.cfg.classes), labels.reshape(-1))

    def example_inputs(self, generator=None):
        cfg = self.cfg
        spect = torch.randn(cfg.batch, 1, cfg.freq, cfg.frames, generator=generator)
        labels = torch.randint(0, cfg.classes, (cfg.frames // 2, cfg.batch), generator=generator)
        return spect, labels


@dataclasses.dataclass
class TransformerConfig:
    batch: int
    seq: int
    vocab: int
    d_model: int
    heads: int
    ffn: int
    layers: int
    dropout: float = 0.1


TRANSFORMER_PAPER = TransformerConfig(batch=32, seq=128, vocab=32000, d_model=512,
                                      heads=8, ffn=2048, layers=6)
TRANSFORMER_CI = TransformerConfig(batch=8, seq=32, vocab=256, d_model=64, heads=4,
                                   ffn=256, layers=2)


class Attention(nn.Module):
    def __init__(self, d_model, heads, dropout, causal):
        super().__init__()
        self.heads = heads
        self.causal = causal
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).reshape(b, s, 3, self.heads, d // self.heads).permute(
            2, 0, 3, 1, 4).unbind(0)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        if self.causal:
            mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
        attn = self.drop(torch.softmax(scores, dim=-1))
        out = (attn @ v).transpose(1, 2).reshape(b, s, d)
        return self.proj(out)


class Block(nn.Module):
    def __init__(self, cfg: TransformerConfig, causal, pre_norm):
        super().__init__()
        self.pre_norm = pre_norm
        self.attn = Attention(cfg.d_model, cfg.heads, cfg.dropout, causal)
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.ffn = nn.Sequential(nn.Linear(cfg.d_model, cfg.ffn), nn.GELU(),
                                 nn.Linear(cfg.ffn, cfg.d_model), nn.Dropout(cfg.dropout))

    def forward(self, x):
        if self.pre_norm:
            x = x + self.attn(self.ln1(x))
            return x + self.ffn(self.ln2(x))
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.ffn(x))


class TransformerEncoder(nn.Module):
    """Post-norm encoder (the original Transformer) with a token classifier."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Parameter(torch.randn(cfg.seq, cfg.d_model) * 0.02)
        self.blocks = nn.ModuleList(Block(cfg, causal=False, pre_norm=False)
                                    for _ in range(cfg.layers))
        self.head = nn.Linear(cfg.d_model, cfg.vocab)

    def forward(self, tokens, labels):
        x = self.embed(tokens) + self.pos
        for block in self.blocks:
            x = block(x)
        return F.cross_entropy(self.head(x).reshape(-1, self.cfg.vocab), labels.reshape(-1))

    def example_inputs(self, generator=None):
        cfg = self.cfg
        tokens = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq), generator=generator)
        labels = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq), generator=generator)
        return tokens, labels


GPT_CI = TransformerConfig(batch=4, seq=64, vocab=512, d_model=64, heads=4, ffn=256,
                           layers=3)


class GPT(nn.Module):
    """Pre-norm causal decoder with a language-model head tied to the token
    embedding (one parameter, two uses)."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Parameter(torch.randn(cfg.seq, cfg.d_model) * 0.02)
        self.blocks = nn.ModuleList(Block(cfg, causal=True, pre_norm=True)
                                    for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        nn.init.normal_(self.embed.weight, std=0.02)

    def forward(self, tokens, targets):
        x = self.embed(tokens) + self.pos
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.embed.weight.t()
        return F.cross_entropy(logits.reshape(-1, self.cfg.vocab), targets.reshape(-1))

    def example_inputs(self, generator=None):
        cfg = self.cfg
        seq = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq + 1), generator=generator)
        return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()


class Bottleneck(nn.Module):
    """ResNet's 1x1 -> 3x3 -> 1x1 block with batch norms and a projection
    shortcut where the shape changes (He et al. 2016, v1.5 strides)."""

    def __init__(self, inplanes, planes, stride):
        super().__init__()
        out = planes * 4
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.shortcut = None
        if stride != 1 or inplanes != out:
            self.shortcut = nn.Sequential(nn.Conv2d(inplanes, out, 1, stride, bias=False),
                                          nn.BatchNorm2d(out))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (x if self.shortcut is None else self.shortcut(x)))


class ResNet50(nn.Module):
    """ResNet-50 (stages of 3, 4, 6, 3 bottlenecks) with a cross-entropy
    loss, written out so the suite needs no torchvision. `stages` sets the
    bottlenecks per stage for deeper or shallower ResNets of the same
    structure, e.g. (3, 4, 23, 3) is ResNet-101; the default is ResNet-50.
    Layers (convolutions on the main path and the classifier):
    3 * sum(stages) + 2."""

    def __init__(self, batch=8, image=96, classes=100, width=64, stages=(3, 4, 6, 3)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        blocks, inplanes = [], width
        if len(stages) != 4 or min(stages) < 1:
            raise ValueError(f"stages must be 4 block counts >= 1, not {stages!r}")
        for stage, (count, stride) in enumerate(zip(stages, (1, 2, 2, 2))):
            planes = width * 2 ** stage
            for i in range(count):
                blocks.append(Bottleneck(inplanes, planes, stride if i == 0 else 1))
                inplanes = planes * 4
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(inplanes, classes)
        self.batch, self.image, self.classes = batch, image, classes

    def forward(self, images, labels):
        features = self.blocks(self.stem(images)).mean(dim=(2, 3))
        return F.cross_entropy(self.fc(features), labels)

    def example_inputs(self, generator=None):
        images = torch.randn(self.batch, 3, self.image, self.image, generator=generator)
        labels = torch.randint(0, self.classes, (self.batch,), generator=generator)
        return images, labels


class HfGpt2(nn.Module):
    """Hugging Face's GPT-2 (transformers' GPT2LMHeadModel, its defaults but
    4 layers of width 256 and a vocabulary of 8192), batch 4 x 256, the loss
    its only output: the graph of issue 24's memory-limit bar."""

    def __init__(self, layers=4, width=256, vocab=8192, batch=4, seq=256):
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel
        config = GPT2Config(n_layer=layers, n_embd=width, n_head=4, vocab_size=vocab,
                            n_positions=seq)
        self.model = GPT2LMHeadModel(config).train()
        self.cfg = dict(layers=layers, width=width, vocab=vocab, batch=batch, seq=seq)

    def forward(self, ids):
        return self.model(input_ids=ids, labels=ids).loss

    def example_inputs(self, generator=None):
        cfg = self.cfg
        return (torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["seq"]), generator=generator),)


def build(name: str) -> nn.Module:
    """The CI-sized model `name`, deterministically initialised."""
    torch.manual_seed(0)
    if name == "nmt":
        return NMT(NMT_CI)
    if name == "deepspeech2":
        return DeepSpeech2(DS2_CI)
    if name == "transformer":
        return TransformerEncoder(TRANSFORMER_CI)
    if name == "resnet50":
        return ResNet50()
    if name == "gpt":
        return GPT(GPT_CI)
    if name == "hf_gpt2":
        return HfGpt2()
    raise ValueError(f"unknown model {name!r}")


def build_paper(name: str) -> nn.Module:
    """The suite model `name` at the paper's sizes (the GPT at the
    Transformer's; ResNet-50 at ImageNet's 224x224, 1,000 classes, batch 32,
    the usual settings: the paper's batch is not in this repository)."""
    torch.manual_seed(0)
    builders = {
        "nmt": lambda: NMT(NMT_PAPER),
        "deepspeech2": lambda: DeepSpeech2(DS2_PAPER),
        "transformer": lambda: TransformerEncoder(TRANSFORMER_PAPER),
        "resnet50": lambda: ResNet50(batch=32, image=224, classes=1000),
        "gpt": lambda: GPT(TRANSFORMER_PAPER),
    }
    if name not in builders:
        raise ValueError(f"no paper size for model {name!r}")
    return builders[name]()


MODEL_NAMES = ("nmt", "deepspeech2", "transformer", "resnet50", "gpt")
# Graphs kept in tests/data/graphs/ besides MODEL_NAMES' (export_graphs.py).
FIXTURE_NAMES = MODEL_NAMES + ("hf_gpt2",)


def example_inputs(model):
    return model.example_inputs(torch.Generator().manual_seed(1))
