"""The workload catalog: counts derived from layer definitions, checked against published figures
and against hand derivations; lookups, ad-hoc specs and user entries."""

from __future__ import annotations

import importlib

import numpy as np
import pandas as pd
import pytest

from dlexplore.catalog import _cnn
from dlexplore.catalog._types import Layer, Workload
from dlexplore.catalog.workloads import (
    IMAGENET_JPEG_BYTES,
    WORKLOADS,
    _load_csv,
    transformer,
    workload,
    workload_from_dict,
    workloads,
)
from dlexplore.errors import DlexploreError, InputFileError, UnknownNameError

# Published parameter counts: torchvision's model table (sum of model.parameters()) and the
# Hugging Face models (BertModel with pooler; GPT2Model, whose LM head is tied).
PUBLISHED_PARAMS = {
    "alexnet": 61_100_840,
    "vgg16": 138_357_544,
    "resnet18": 11_689_512,
    "resnet34": 21_797_672,
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "resnet152": 60_192_808,
    "googlenet": 6_624_904,
    "inception_v3": 27_161_264,  # with AuxLogits, as torchvision counts it
    "bert-base": 109_482_240,
    "bert-large": 335_141_888,
    "gpt2": 124_439_808,
    "gpt2-medium": 354_823_168,
    "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200,
}

# Forward GMACs of conv and linear layers, torchvision's model table ("GFLOPS" there), at 224x224
# (299x299 for inception_v3).
PUBLISHED_GMACS = {
    "alexnet": 0.71,
    "vgg16": 15.47,
    "resnet18": 1.81,
    "resnet34": 3.66,
    "resnet50": 4.09,
    "resnet101": 7.80,
    "resnet152": 11.51,
    "googlenet": 1.50,
    "inception_v3": 5.71,
}
FLOPS_TOLERANCE = 0.02  # relative; the table rounds to 2-3 digits and we leave out bias adds


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_params_match_published_counts(name):
    assert workload(name).params == PUBLISHED_PARAMS[name]


@pytest.mark.parametrize("name", sorted(PUBLISHED_GMACS))
def test_cnn_forward_flops_match_published_gmacs(name):
    w = workload(name)
    published_flops = 2 * PUBLISHED_GMACS[name] * 1e9
    assert w.flops_per_sample == pytest.approx(published_flops, rel=FLOPS_TOLERANCE)


def test_aux_classifier_counts():
    # inception_v3's AuxLogits: conv0 768->128 1x1 + BN, conv1 128->768 5x5 + BN, fc 768->1000.
    aux = (768 * 128 + 2 * 128) + (128 * 768 * 25 + 2 * 768) + (768 * 1000 + 1000)
    assert workload("inception_v3:aux=false").params == 27_161_264 - aux == 23_834_568

    # googlenet's two aux heads: 1x1 conv to 128 + BN, fc 2048->1024, fc 1024->1000.
    def head(cin):
        return cin * 128 + 2 * 128 + 2048 * 1024 + 1024 + 1024 * 1000 + 1000

    assert workload("googlenet:aux=true").params == 6_624_904 + head(512) + head(528)


def test_resnet50_activations_are_plausible():
    # Conv and BN outputs of a 224x224 image: about 22 M fp32 values.
    mb = workload("resnet50").activation_bytes_per_sample / 1e6
    assert 80 < mb < 120


def test_single_conv_by_hand():
    net = _cnn._Net((3, 8, 8))
    y = net.conv("c", (3, 8, 8), 5, 3, 1, 1, bias=True)
    assert y == (5, 8, 8)
    conv = net.layers[-1]
    assert conv.params == 3 * 3 * 3 * 5 + 5
    assert conv.flops == 2 * 3 * 3 * 3 * 5 * 8 * 8  # bias adds not counted
    assert conv.activation_bytes == 5 * 8 * 8 * 4
    assert net.layers[0].activation_bytes == 3 * 8 * 8 * 4  # the image, kept by the first conv

    y = net.conv("s", (4, 9, 9), 6, (1, 3), (2, 2), (0, 1), groups=2)
    assert y == (6, 5, 5)  # (9 - 1) // 2 + 1, (9 + 2 - 3) // 2 + 1
    assert net.layers[-1].params == (4 // 2) * 1 * 3 * 6
    assert net.layers[-1].flops == 2 * (4 // 2) * 3 * 6 * 25


def test_pooling_sizes_follow_pytorch():
    assert _cnn._out_size(112, 3, 2, 0, ceil=True) == 56  # googlenet maxpool1
    assert _cnn._out_size(112, 3, 2, 0) == 55
    assert _cnn._out_size(14, 2, 2, 0, ceil=True) == 7
    assert _cnn._out_size(5, 2, 2, 1, ceil=True) == 3  # last window may not start in the padding
    net = _cnn._Net((8, 4, 4))
    net.maxpool("m", (8, 4, 4), 2, 2)
    assert net.layers[-1].activation_bytes == 8 * 2 * 2 * (4 + 8)  # output + int64 indices


def test_cnn_layers_are_fine_grained():
    kinds = pd.Series([layer.kind for layer in workload("resnet50").layers]).value_counts()
    assert kinds["conv"] == 53 and kinds["bn"] == 53 and kinds["linear"] == 1
    names = [layer.name for layer in workload("resnet50").layers]
    assert names[:4] == ["input", "conv1", "bn1", "maxpool"] and names[-1] == "fc"
    assert "layer1.0.downsample.0" in names


# --- transformers ------------------------------------------------------------------------------

CONFIGS = [
    dict(layers=1, hidden=4, heads=2, seq=3, vocab=10),
    dict(layers=12, hidden=768, heads=12, seq=512, vocab=30522),
    dict(layers=24, hidden=1024, heads=16, seq=2048, vocab=50257, causal=True),
    dict(layers=96, hidden=12288, heads=96, seq=2048, vocab=51200, causal=True),  # GPT-3 175B
]


@pytest.mark.parametrize("c", CONFIGS)
def test_transformer_flops_match_megatron(c):
    w = transformer(**c)
    L, h, s, V = c["layers"], c["hidden"], c["seq"], c["vocab"]
    logits = 2 * s * h * V
    assert w.flops_per_sample == pytest.approx(
        24 * s * L * h**2 * (1 + s / (6 * h) + V / (12 * L * h)), rel=1e-12
    )
    # Narayanan et al. 2021 count a training step with recomputation: 4 x the layers' forward
    # (forward, recomputed forward, 2 x backward) and 3 x the logits' (not recomputed).
    step = 4 * (w.flops_per_sample - logits) + 3 * logits
    megatron = 96 * s * L * h**2 * (1 + s / (6 * h) + V / (16 * L * h))
    assert step == pytest.approx(megatron, rel=1e-12)


def korthikanti_16bit(L, s, h, a, V, pooler=False):
    """Korthikanti et al. 2022 per layer, plus embedding dropout mask (sh), the final/embedding
    layer norm input (2sh), the logits' input (2sh) and fp32 logits (4sV), and the pooler (2h)."""
    return L * s * h * (34 + 5 * a * s / h) + 5 * s * h + 4 * s * V + (2 * h if pooler else 0)


@pytest.mark.parametrize("c", CONFIGS)
def test_transformer_activations_match_korthikanti(c):
    w = transformer(**c)
    expected = korthikanti_16bit(c["layers"], c["seq"], c["hidden"], c["heads"], c["vocab"])
    assert w.activation_bytes_per_sample / 2 == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "name,L,s,h,a,V,pooler",
    [
        ("bert-base", 12, 512, 768, 12, 30522, True),
        ("bert-large", 24, 512, 1024, 16, 30522, True),
        ("gpt2", 12, 1024, 768, 12, 50257, False),
        ("gpt2-xl", 48, 1024, 1600, 25, 50257, False),
    ],
)
def test_catalog_transformer_activations(name, L, s, h, a, V, pooler):
    w = workload(name)
    assert w.activation_bytes_per_sample / 2 == korthikanti_16bit(L, s, h, a, V, pooler)
    pooler_flops = 2 * h * h if pooler else 0
    assert w.flops_per_sample == L * (24 * s * h * h + 4 * s * s * h) + 2 * s * h * V + pooler_flops


def test_tiny_transformer_by_hand():
    w = transformer(1, 4, 2, 3, 10)  # L=1, h=4, a=2, s=3, V=10
    layer = (4 * 12 + 12) + (4 * 4 + 4) + (4 * 16 + 16) + (16 * 4 + 4) + 2 * 2 * 4
    assert layer == 12 * 4**2 + 13 * 4
    assert w.params == 10 * 4 + 3 * 4 + layer + 2 * 4  # word + position + layer + embedding LN
    assert w.flops_per_sample == 2 * 3 * 4 * (12 + 4 + 16 + 16) + 2 * 2 * 3 * 3 * 4 + 2 * 3 * 4 * 10
    # 16-bit: 3*4*(34 + 5*2*3/4) + 5*3*4 + 4*3*10 = 498 + 60 + 120
    assert w.activation_bytes_per_sample == 2 * 678
    assert w.config == {
        "layers": 1,
        "hidden": 4,
        "heads": 2,
        "seq": 3,
        "vocab": 10,
        "ffn_hidden": 16,
        "causal": False,
        "tied_embeddings": True,
        "max_positions": 3,
        "type_vocab": 0,
        "pooler": False,
        "prenorm": False,
    }
    assert w.name == "transformer:layers=1,hidden=4,heads=2,seq=3,vocab=10"
    assert w.input_bytes_per_sample == 3 * 2 and w.sample_unit == "sequences"


def test_transformer_options():
    base = transformer(2, 8, 2, 4, 100)
    untied = transformer(2, 8, 2, 4, 100, tied_embeddings=False)
    assert untied.params - base.params == 100 * 8
    ffn = transformer(2, 8, 2, 4, 100, ffn_hidden=20)
    assert ffn.params - base.params == 2 * ((8 * 20 + 20 + 20 * 8) - (8 * 32 + 32 + 32 * 8))
    assert ffn.activation_bytes_per_sample / 2 == pytest.approx(
        2 * 4 * 8 * (18 + 4 * 20 / 8 + 5 * 2 * 4 / 8) + 5 * 4 * 8 + 4 * 4 * 100
    )
    bert = transformer(2, 8, 2, 4, 100, type_vocab=2, pooler=True, max_positions=16)
    assert bert.params - base.params == 2 * 8 + (8 * 8 + 8) + (16 - 4) * 8
    assert transformer(2, 8, 2, 4, 100, input_bytes_per_sample=77).input_bytes_per_sample == 77
    assert transformer(2, 8, 2, 4, 70_000).input_bytes_per_sample == 4 * 4  # int32 ids
    gpt = transformer(2, 8, 2, 4, 100, causal=True, name="tiny-gpt")
    assert gpt.name == "tiny-gpt" and gpt.params == base.params
    names = [layer.name for layer in gpt.layers]
    assert names[3] == "layers.0.ln1" and names[-2] == "final_ln" and names[-1] == "logits"
    names = [layer.name for layer in base.layers]
    assert names[2] == "embed.ln" and names[4] == "layers.0.attn.qkv"
    with pytest.raises(DlexploreError, match="multiple of heads"):
        transformer(2, 10, 3, 4, 100)
    with pytest.raises(DlexploreError, match="max_positions"):
        transformer(2, 8, 2, 4, 100, max_positions=2)
    with pytest.raises(DlexploreError, match="layers: expected a positive integer, got 0"):
        transformer(0, 8, 2, 4, 100)


def test_transformer_layers_are_fine_grained():
    w = workload("bert-base")
    kinds = pd.Series([layer.kind for layer in w.layers]).value_counts()
    assert kinds["linear"] == 12 * 4 + 2  # qkv, out, fc1, fc2 per layer; pooler, logits
    assert kinds["layernorm"] == 12 * 2 + 1
    assert w.config["hidden"] == 768 and w.config["ffn_hidden"] == 3072


# --- gradients ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["resnet50", "inception_v3", "bert-base", "gpt2", "alexnet"])
def test_gradients_in_backward_order(name):
    w = workload(name)
    grads = w.gradient_params_backward
    assert grads.sum() == w.params
    assert list(grads) == [layer.params for layer in reversed(w.layers) if layer.params > 0]
    ready = w.gradient_ready_fraction
    assert len(ready) == len(grads)
    assert ready[0] > 0 and np.all(np.diff(ready) >= 0) and ready[-1] == pytest.approx(1.0)


# --- lookups and specs -------------------------------------------------------------------------


def test_required_entries_and_sources():
    for name in PUBLISHED_PARAMS:
        w = WORKLOADS.get(name)
        assert isinstance(w, Workload) and w.source
    assert workload("resnet50").input_bytes_per_sample == IMAGENET_JPEG_BYTES
    assert workload("inception_v3").config["image_size"] == 299


@pytest.mark.parametrize(
    "alias,name",
    [
        ("ResNet-50", "resnet50"),
        ("RESNET_50", "resnet50"),
        ("inception-v3", "inception_v3"),
        ("InceptionV3", "inception_v3"),
        ("vgg-16", "vgg16"),
        ("BERT-Base-Uncased", "bert-base"),
        ("gpt2-small", "gpt2"),
        ("GPT-2", "gpt2"),
        ("bert_large", "bert-large"),
    ],
)
def test_lookup_case_insensitive_with_aliases(alias, name):
    assert workload(alias) is WORKLOADS.get(name)


def test_unknown_name_suggests():
    with pytest.raises(UnknownNameError, match="'resnet50'") as info:
        workload("resnet05")
    assert isinstance(info.value, DlexploreError) and isinstance(info.value, KeyError)
    with pytest.raises(DlexploreError):
        workload(50)


def test_workload_passthrough():
    w = transformer(2, 8, 2, 4, 100)
    assert workload(w) is w


def test_spec_strings():
    kw = workload("transformer:layers=24,hidden=1024,heads=16,seq=512,vocab=50257")
    pos = workload("transformer:24,1024,16,512,50257")
    assert kw.name == pos.name == "transformer:layers=24,hidden=1024,heads=16,seq=512,vocab=50257"
    assert kw.params == pos.params and kw.flops_per_sample == pos.flops_per_sample
    assert kw.params == transformer(24, 1024, 16, 512, 50257).params
    assert kw.config["ffn_hidden"] == 4096
    mixed = workload("transformer: 24, 1024, 16, 512, 50257, causal=true, ffn_hidden=2048")
    assert mixed.config["causal"] and mixed.config["prenorm"] and mixed.config["ffn_hidden"] == 2048
    assert workload("resnet:50").params == workload("resnet50").params
    assert workload("resnet:depth=200").params > workload("resnet152").params


@pytest.mark.parametrize(
    "spec,message",
    [
        ("transformer:24,1024", "missing heads, seq, vocab"),
        ("transformer:", "expected transformer:layers, hidden, heads, seq, vocab"),
        ("transformer:24,big,16,512,50257", "hidden: expected a positive integer, got 'big'"),
        ("transformer:24,1024,16,512,50257,7", "too many positional values"),
        ("transformer:layers=24,1024,16,512,50257", "positional value '1024' after key=value"),
        ("transformer:24,,16,512,50257", "empty item"),
        ("transformer:24,1024,16,512,50257,hiden=3", "unknown key .*did you mean 'hidden'"),
        ("transformer:24,1024,16,512,50257,layers=3", "layers given twice"),
        ("transformer:24,1000,16,512,50257", "multiple of heads"),
        ("transformer:24,1024,16,512,50257,causal=maybe", "causal: expected true or false"),
        ("transfomer:24,1024,16,512,50257", "unknown builder 'transfomer'"),
        ("resnet:51", "ResNet depth must be one of"),
    ],
)
def test_malformed_specs(spec, message):
    with pytest.raises(DlexploreError, match=message) as info:
        workload(spec)
    assert str(info.value).startswith(f"workload spec {spec!r}")


def test_workloads_table():
    df = workloads()
    for column in [
        "name",
        "aliases",
        "kind",
        "params",
        "flops_per_sample",
        "activation_bytes_per_sample",
        "input_bytes_per_sample",
        "sample_unit",
        "layers",
        "gradient_tensors",
        "source",
    ]:
        assert column in df.columns
    assert len(df) == len(WORKLOADS) and df["name"].is_unique
    row = df.set_index("name").loc["resnet50"]
    assert row["params"] == 25_557_032 and row["gradient_tensors"] == 107
    assert row["kind"] == "cnn" and row["sample_unit"] == "images"
    assert df.set_index("name").loc["gpt2", "kind"] == "transformer"


# --- user entries ------------------------------------------------------------------------------

ORIGIN = "my.json entry 3"


def test_from_dict_transformer():
    w = workload_from_dict(
        {
            "name": "mine",
            "aliases": "m1;m2",
            "transformer": {"layers": 2, "hidden": 8, "heads": 2, "seq": 4, "vocab": 100, "causal": True},
        },
        origin=ORIGIN,
    )
    assert w.params == transformer(2, 8, 2, 4, 100, causal=True).params
    assert w.aliases == ("m1", "m2") and w.source == f"user file {ORIGIN}"
    assert w.kind == "transformer" and w.config["causal"] is True


def test_from_dict_layers_and_totals():
    w = workload_from_dict(
        {
            "name": "net",
            "input_bytes_per_sample": 1000,
            "source": "me",
            "sample_unit": "frames",
            "layers": [
                {"name": "a", "params": 10, "flops": 100, "activation_bytes": 40},
                {"name": "b", "params": 0, "flops": 50.5, "activation_bytes": 8, "kind": "relu"},
                {"name": "c", "params": 5, "flops": 30, "activation_bytes": 4},
            ],
        },
        origin=ORIGIN,
    )
    assert (w.params, w.flops_per_sample, w.activation_bytes_per_sample) == (15, 180.5, 52)
    assert list(w.gradient_params_backward) == [5, 10]
    assert w.layers[1] == Layer("b", "relu", 0, 50.5, 8.0)
    assert w.sample_unit == "frames" and w.source == "me" and w.kind == "custom"

    t = workload_from_dict(
        {
            "name": "tot",
            "params": 1e6,
            "flops_per_sample": 2e9,
            "activation_bytes_per_sample": 5e7,
            "input_bytes_per_sample": 3e4,
        },
        origin=ORIGIN,
    )
    assert (t.params, len(t.layers), list(t.gradient_ready_fraction)) == (1_000_000, 1, [1.0])
    b = workload_from_dict({"name": "r200", "builder": "resnet", "config": "depth=200"}, origin=ORIGIN)
    assert b.params == workload("resnet:200").params


TOTALS = {
    "name": "x",
    "params": 1,
    "flops_per_sample": 1,
    "activation_bytes_per_sample": 1,
    "input_bytes_per_sample": 1,
}


@pytest.mark.parametrize(
    "entry,message",
    [
        ({**TOTALS, "params": "abc"}, "params: expected a non-negative integer, got 'abc'"),
        ({**TOTALS, "params": -3}, "params: expected a non-negative integer, got -3"),
        ({**TOTALS, "flops_per_sample": float("nan")}, "flops_per_sample: expected a non-neg"),
        ({**TOTALS, "name": ""}, "name: expected a non-empty string"),
        ({k: v for k, v in TOTALS.items() if k != "name"}, "name: missing"),
        (
            {k: v for k, v in TOTALS.items() if k != "input_bytes_per_sample"},
            "input_bytes_per_sample: missing",
        ),
        ({k: v for k, v in TOTALS.items() if k != "params"}, "missing params"),
        ({**TOTALS, "flops": 3}, "flops: unknown key .*did you mean 'flops_per_sample'"),
        ({**TOTALS, "aliases": [1]}, "aliases: expected a list of strings"),
        ({**TOTALS, "layers": []}, "exactly one of"),
        ({"name": "x"}, "exactly one of .*found none"),
        (["name"], "expected an object"),
        (
            {"name": "t", "transformer": {"layers": 2, "hidden": 8, "heads": 0, "seq": 4, "vocab": 9}},
            "transformer.heads: expected a positive",
        ),
        (
            {"name": "t", "transformer": {"layers": 2, "hidden": 8, "heads": 2, "seq": 4}},
            "missing transformer.vocab",
        ),
        (
            {"name": "t", "transformer": {"layers": True, "hidden": 8, "heads": 2, "seq": 4, "vocab": 9}},
            "transformer.layers: expected a positive",
        ),
        ({"name": "t", "transformer": [2, 8]}, "transformer: expected an object"),
        (
            {
                "name": "l",
                "input_bytes_per_sample": 1,
                "layers": [
                    {"name": "a", "params": 1, "flops": 1, "activation_bytes": 1},
                    {"name": "b", "params": 1, "flops": -1, "activation_bytes": 1},
                ],
            },
            r"layers\[1\].flops: expected a non-negative number, got -1",
        ),
        (
            {"name": "l", "input_bytes_per_sample": 1, "layers": [{"name": "a", "params": 1}]},
            r"layers\[0\]: missing flops, activation_bytes",
        ),
        ({"name": "l", "input_bytes_per_sample": 1, "layers": "abc"}, "layers: expected a non-empty list"),
        ({"name": "b", "builder": "lenet"}, "builder: unknown builder 'lenet'"),
    ],
)
def test_from_dict_rejects(entry, message):
    with pytest.raises(DlexploreError, match=message) as info:
        workload_from_dict(entry, origin=ORIGIN)
    assert str(info.value).startswith(ORIGIN + ": ")


def test_csv_errors_name_file_and_line(tmp_path, monkeypatch):
    # The package's workloads() function shadows the module's name as an attribute.
    module = importlib.import_module("dlexplore.catalog.workloads")

    (tmp_path / "catalog").mkdir()
    header = "name,aliases,builder,config,input_bytes_per_sample,sample_unit,source,description\n"
    (tmp_path / "catalog" / "workloads.csv").write_text(
        "# comment\n"
        + header
        + "ok,,resnet,depth=18,1,images,src,\n"
        + 'bad,,resnet,"depth=18,width=3",1,images,src,\n'
    )
    monkeypatch.setattr(module, "data_dir", lambda: tmp_path)
    with pytest.raises(InputFileError, match=r"workloads.csv, line 4: width: unknown key"):
        _load_csv(module.Registry("workload"))
