"""A checkpoint's weights: model.safetensors (one file or an index and its shards), or
pytorch_model*.bin through torch.load(weights_only=True) when torch is installed.

Every header is checked first (float dtypes, layer count, names, shapes); then each tensor
is read through its own short-lived `safe_open` and converted to float32 (bf16 through
`ml_dtypes`), so peak memory is the float32 model plus about one layer. Both formats go
through one name map (layouts.tensor_map).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from .hf_json import CheckpointError, read_json, short
from .layouts import convert, layer_prefix, tensor_map
from .model import ModelConfig

FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")
# buffers some checkpoints save that the model recomputes (rope tables, GPT-2's causal mask)
IGNORED = ("inv_freq", "attn.bias", "attn.masked_bias")
# tensor name -> the file holding it (None: every tensor, the one model.safetensors);
# a list: the pytorch_model*.bin files of a checkpoint that has no safetensors
Files = dict[str | None, Path] | list[Path]


class Header(NamedTuple):
    """One tensor as its file's header describes it (nothing read yet)."""

    shape: tuple[int, ...]
    dtype: str  # safetensors' name: F32, BF16, ...
    path: Path  # the file holding it


def weight_files(directory: Path) -> Files:
    """tensor name -> the safetensors file holding it (one file, or the shard index); or
    the .bin files, where there is no safetensors file."""
    single, index = directory / "model.safetensors", directory / "model.safetensors.index.json"
    if single.is_file():
        return {None: single}
    if not index.is_file():
        bins = sorted(directory.glob("pytorch_model*.bin"))
        if bins:
            return bins
        raise CheckpointError(
            f"{directory}: missing file model.safetensors (or model.safetensors.index.json)"
        )
    weight_map = read_json(index).get("weight_map")
    if not isinstance(weight_map, dict):
        raise CheckpointError(f"{index}: field weight_map must be an object")
    for shard in set(weight_map.values()):
        if not isinstance(shard, str) or Path(shard).name != shard:
            raise CheckpointError(
                f"{index}: weight_map names {short(shard)}, not a file in {directory}"
            )
        if not (directory / shard).is_file():
            raise CheckpointError(f"{directory / shard}: missing file (listed in {index.name})")
    return {name: directory / shard for name, shard in weight_map.items()}


def read_headers(files: dict[str | None, Path]) -> dict[str, Header]:
    """name -> (shape, dtype, file) from the safetensors headers alone (no tensor is read);
    every tensor must be a float."""
    from safetensors import SafetensorError, safe_open

    out: dict[str, Header] = {}
    for path in dict.fromkeys(files.values()):
        try:
            with safe_open(str(path), framework="np") as f:
                for name in f.keys():
                    piece = f.get_slice(name)
                    out[name] = Header(tuple(piece.get_shape()), piece.get_dtype(), path)
        except (SafetensorError, OSError, TypeError) as e:
            raise CheckpointError(f"{path}: cannot read safetensors ({e})") from None
    for name, (_, dtype, path) in out.items():
        if dtype not in FLOAT_DTYPES:
            raise CheckpointError(
                f"{path}: tensor {name} has dtype {dtype}; weights must be "
                f"floating point ({', '.join(FLOAT_DTYPES)})"
            )
    return out


def check_sizes(
    config: ModelConfig, headers: dict[str, Header], where: Path, family: str = "llama"
) -> None:
    """The config's layer count against the layers the files hold, before any table of
    tensor names is built (a 1 KB config.json may declare 10^8 layers)."""
    held = set()
    prefix = layer_prefix(family).split("{}")[0]
    for name in headers:
        if name.startswith(prefix):
            index = name[len(prefix) :].split(".")[0]
            if index.isdigit():
                held.add(int(index))
    if config.layers > len(held):
        raise CheckpointError(
            f"{where}: config.json declares num_hidden_layers "
            f"{config.layers} but the weight files hold {len(held)} layers"
        )


def load_weights(
    directory: str | Path, config: ModelConfig, family: str = "llama"
) -> dict[str, np.ndarray]:
    """Every tensor `tensor_shapes(config)` lists, float32: the headers checked first, then
    one tensor at a time."""
    directory = Path(directory)
    files = weight_files(directory)
    read: Callable[[str, Path], np.ndarray]
    if isinstance(files, list):
        state = read_bin(files)
        headers = {k: Header(tuple(t.shape), "F32", files[0]) for k, t in state.items()}

        def read(name: str, path: Path) -> np.ndarray:  # each torch tensor goes once read
            array: np.ndarray = state.pop(name).float().numpy()
            return array

    else:
        headers, read = read_headers(files), read_safetensor
    check_sizes(config, headers, directory, family)
    wanted = tensor_map(family, config)
    _check_names(config, headers, wanted, files, directory)
    weights = {}
    for name in wanted:  # one tensor at a time: each source goes once it is converted
        array = read(name, headers[name].path)
        for target, transposed, rows in wanted[name][1]:
            weights[target] = convert(array, transposed, rows)
        del array
    return weights


def _check_names(
    config: ModelConfig,
    headers: dict[str, Header],
    wanted: dict[str, tuple[Any, list[Any]]],
    files: Files,
    directory: Path,
) -> None:
    """Every tensor the model needs is there with its shape, and none is left unused."""
    for name, (shape, _) in wanted.items():
        if name not in headers:
            listed = files[0] if isinstance(files, list) else files.get(name, files.get(None))
            where = listed if listed is not None else directory / "model.safetensors.index.json"
            raise CheckpointError(f"{where}: missing tensor {name}")
        if headers[name].shape != shape:
            raise CheckpointError(
                f"{headers[name].path}: tensor {name} has shape "
                f"{headers[name].shape} but config.json implies {shape}"
            )
    extra = sorted(
        k
        for k in set(headers) - set(wanted)
        if not k.endswith(IGNORED) and not (k == "lm_head.weight" and config.tie_embeddings)
    )
    if extra:
        raise CheckpointError(
            f"{headers[extra[0]].path}: tensor {extra[0]} is not used by the "
            f"model config.json describes ({len(extra)} such tensors)"
        )


def read_safetensor(name: str, path: Path) -> np.ndarray:
    """One tensor, through its own short-lived safe_open (the mapped pages go with it)."""
    import ml_dtypes  # noqa: F401  (registers bfloat16 with NumPy for safetensors)
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="np") as f:
            array: np.ndarray = f.get_tensor(name)
            return array
    except (SafetensorError, OSError, TypeError) as e:
        raise CheckpointError(f"{path}: cannot read safetensors ({e})") from None


def read_bin(paths: list[Path]) -> dict[str, Any]:
    """A `.bin`-only checkpoint's tensors, read with torch.load(weights_only=True) (torch's
    restricted unpickler: tensors and plain containers only) when torch is installed."""
    try:
        import torch
    except ImportError:
        raise CheckpointError(
            f"{paths[0]}: a pytorch_model.bin checkpoint needs torch to read "
            f"(pip install 'pagedsim[oracle]'), or convert it to "
            f"model.safetensors"
        ) from None
    weights: dict[str, Any] = {}  # name -> torch.Tensor
    for path in paths:
        try:
            state = torch.load(str(path), map_location="cpu", weights_only=True)
        except Exception as e:  # torch raises many kinds on a bad file
            raise CheckpointError(
                f"{path}: cannot read with torch.load(weights_only=True) "
                f"({str(e).splitlines()[0][:120]})"
            ) from None
        if not isinstance(state, dict):
            raise CheckpointError(f"{path}: expected a dict of tensors")
        for name, t in state.items():
            if not (isinstance(t, torch.Tensor) and t.is_floating_point()):
                raise CheckpointError(f"{path}: tensor {name} is not a floating-point tensor")
            weights[name] = t
    return weights
