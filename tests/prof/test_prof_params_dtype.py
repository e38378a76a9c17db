"""Params says the dtype DType says: under autocast (fp32 markers, 16-bit kernels) and where a
matrix kernel's name names its dtype, `type=` follows the kernel, not the marker's arguments."""
from __future__ import annotations

import pytest

import pyprof
from pyprof.prof.pricing.registry import retype
from pyprof.prof.pricing.values import short
from test_views_common import ROOT


def test_retype_replaces_the_last_type_field_only():
    assert retype("M=512,N=768,K=256,type=fp32", "bfloat16") == "M=512,N=768,K=256,type=bf16"
    assert retype("shape=[2],kind=type=x,type=fp32", "float16") == "shape=[2],kind=type=x,type=fp16"
    assert retype("bytes=4,kind=HtoD", "float16") == "bytes=4,kind=HtoD"  # no type field: unchanged


@pytest.mark.parametrize("example", ["gpt", "resnet"])
def test_params_type_matches_dtype_on_every_row(example):
    rows = list(pyprof.rows(f"{ROOT}/examples/{example}.sqlite", columns="op,kernel,params,dtype"))
    typed = [r for r in rows if r["params"] and "type=" in r["params"] and r["dtype"]]
    assert typed and all(r["params"].rsplit("type=", 1)[1] == short(r["dtype"]) for r in typed)
    autocast = [r for r in rows if r["op"] in ("linear", "conv2d")]
    assert autocast and {r["params"].rsplit("type=", 1)[1] for r in autocast} == {"bf16" if example == "gpt" else "fp16"}
