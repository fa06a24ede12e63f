"""The names of `vkinfer bench`'s former one-file module, kept for the code that imports them from here.

`vkinfer bench` now lives in these modules (its documentation: vkinfer.benchmark.cli's docstring):

- cli: the command line and main (parse_args, table, the progress bar, --ray, --plot);
- schedule: one job, engines run interleaved in rotating order into records (bench_model, interleave, vulkan_cap);
- engines: the engines' common part (Engine, make_engines), and one module per engine: engines.vkinfer,
  engines.onnxruntime, engines.litert, engines.ncnn (with the reader of ncnn's .param);
- load: models, their seeded inputs and --config files (Model, load_model, load_config, ncnn_files, BadInput);
- zoo: the built-in zoo of --zoo; stats: the latency summary and the agreement of two engines' outputs.

Setting one of these names here (as a test's monkeypatch does) sets it as well in the modules above that hold the
same object under that name, where the code that reads it now lives, so that it acts as it did when the code
lived in this one file.
"""

from __future__ import annotations

import sys
import types

from ..layer_times import per_layer
from . import cli, engines, load, records, schedule, zoo
from .cli import (
    DEFAULT_OUT,
    DEVICE_KINDS,
    _check_dataset,
    _fmt,
    _models,
    _module,
    _module_plots,
    _parse_cpus,
    _parse_devices,
    _parse_list,
    _parse_peers,
    _parse_threads,
    _Parser,
    _Progress,
    _run_ray,
    main,
    one_line,
    parse_args,
    table,
    write_plots,
)
from .conditions import conditions, git_commit, vulkan_devices
from .engines import PEERS, Engine, _create, _missing_module, _why_missing, make_engines
from .engines import litert as _engine_litert
from .engines import ncnn as _engine_ncnn
from .engines import onnxruntime as _engine_onnxruntime
from .engines import vkinfer as _engine_vkinfer
from .engines.litert import _litert_factory
from .engines.ncnn import (
    _Q_IN,
    _Q_OUT,
    _Q_SHAPE,
    NCNN_MAGIC,
    NCNN_NEEDS,
    _float_pair,
    _graph_names,
    _ncnn_factory,
    _ncnn_input,
    _qparams,
    ncnn_param_blobs,
)
from .engines.onnxruntime import _ort_factory, ort_session_options
from .engines.vkinfer import _vkinfer_factory, analysis
from .load import (
    CONFIG_KEYS,
    INPUT_SEED,
    BadInput,
    Model,
    _load_inputs,
    _random,
    _static,
    _tflite_feed,
    load_config,
    load_model,
    ncnn_files,
)
from .schedule import SOFT_VULKAN_RUNS, _accuracy, _in_round, bench_model, interleave, vulkan_cap
from .stats import agreement, summary
from .zoo import ZOO, ZOO_ONNX, ZOO_QUANT, _build_zoo, _zoo_file, zoo_dir, zoo_models

__all__ = [
    "CONFIG_KEYS", "DEFAULT_OUT", "DEVICE_KINDS", "INPUT_SEED", "NCNN_MAGIC", "NCNN_NEEDS", "PEERS",
    "SOFT_VULKAN_RUNS", "ZOO", "ZOO_ONNX", "ZOO_QUANT", "_Q_IN", "_Q_OUT", "_Q_SHAPE", "BadInput", "Engine", "Model",
    "_Parser", "_Progress", "_accuracy", "_build_zoo", "_check_dataset", "_create", "_float_pair", "_fmt",
    "_graph_names", "_in_round", "_litert_factory", "_load_inputs", "_missing_module", "_models", "_module",
    "_module_plots", "_ncnn_factory", "_ncnn_input", "_ort_factory", "_parse_cpus", "_parse_devices",
    "_parse_list", "_parse_peers", "_parse_threads", "_qparams", "_random", "_run_ray", "_static", "_tflite_feed",
    "_vkinfer_factory", "_why_missing", "_zoo_file", "agreement", "analysis", "bench_model", "conditions",
    "git_commit", "interleave", "load_config", "load_model", "main", "make_engines", "ncnn_files",
    "ncnn_param_blobs", "one_line", "ort_session_options", "parse_args", "per_layer", "records", "summary",
    "table", "vulkan_cap", "vulkan_devices", "write_plots", "zoo_dir", "zoo_models",
]

# The modules whose names a setting here carries over to (see the docstring).
_HOMES = (cli, schedule, engines, _engine_vkinfer, _engine_onnxruntime, _engine_litert, _engine_ncnn, load, zoo)
_UNSET = object()


class _Compat(types.ModuleType):
    def __setattr__(self, name: str, value: object) -> None:
        old = self.__dict__.get(name, _UNSET)
        if old is not _UNSET and not name.startswith("__"):
            for home in _HOMES:
                if home.__dict__.get(name, _UNSET) is old:
                    setattr(home, name, value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Compat
