# Sourced by the lent-GPU-machine scripts (gpu_attention_check, gpu_engines_check): unpacks a bundle made by
# scripts/gpu_bundle, points the loader at its libraries and the machine's cuDNN and CUDA, records the machine,
# and defines `step <name> <timeout s> <command...>`, which runs a command under its own timeout and the
# script's deadline (HZP_DEADLINE_S from the moment this file is sourced), logging to $out/<name>.log and
# a line to $out/summary.txt. Expects $out and $bundle; sets $work (the unpacked bundle) and $b (its bin/).
deadline=$((SECONDS + ${HZP_DEADLINE_S:-540}))
mkdir -p "$out"
work=$(mktemp -d)
tar -C "$work" -xJf "$bundle" || { echo "cannot unpack $bundle"; exit 1; }
b=$work/bin
cudnn_lib=$(python3 -c 'import os, nvidia.cudnn as m; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH="$work/lib:${cudnn_lib}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
summary="$out/summary.txt"
: > "$summary"

step() {  # step <name> <timeout s> <command...>
  local name=$1 limit=$2
  shift 2
  local left=$((deadline - SECONDS - 5))
  if ((left < 15)); then echo "$name: not run (deadline)" | tee -a "$summary"; return; fi
  ((limit > left)) && limit=$left
  local t0=$SECONDS
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "$name: rc=$rc in $((SECONDS - t0)) s (limit $limit s)" | tee -a "$summary"
}

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "cuDNN lib dir: ${cudnn_lib:-none}"; ls "${cudnn_lib:-/nonexistent}" 2>/dev/null | grep -m3 libcudnn
  python3 -c 'import torch; print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version())' 2>&1
  nproc; } > "$out/machine.txt" 2>&1
cat "$out/machine.txt"
