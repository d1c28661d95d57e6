# --8<-- [start:where]
python -m snippets.kernels
# --8<-- [end:where]

# --8<-- [start:relocate]
export TORCHINDUCTOR_CACHE_DIR="$HOME/.cache/torchinductor"
# --8<-- [end:relocate]

# --8<-- [start:clear]
rm -rf "$(python -c 'from torch._inductor.runtime.cache_dir_utils import cache_dir; print(cache_dir())')"
# --8<-- [end:clear]

# --8<-- [start:warm_up]
python -m snippets.kernels warm-up
# --8<-- [end:warm_up]

# --8<-- [start:files]
python -m snippets.kernels files
# --8<-- [end:files]
