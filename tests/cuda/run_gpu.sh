#!/usr/bin/env bash
# Builds, tests and benchmarks the CUDA backend on a GPU machine in one call:
#   tests/cuda/run_gpu.sh [stages...]     stages: build cpu gtest pytest sanitize bench (default: all)
# Uses the machine's python3 (with a CUDA torch) and nvcc; writes logs and JSON under $OUT (or
# out/gpu). Prints one summary table at the end; exits non-zero when any stage failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/out/gpu}
mkdir -p "$OUT"
BUILD=${PCOPS_GPU_BUILD:-build/gpu}
PY=${PYTHON:-python3}
JOBS=${JOBS:-$(nproc)}
STAGES=${*:-build cpu gtest pytest sanitize bench}
export PCOPS_DATA_DIR=${PCOPS_DATA_DIR:-$ROOT/data/cgal}
export PYTHONPATH=$ROOT/python${PYTHONPATH:+:$PYTHONPATH}
export PCOPS_LIBRARY=$ROOT/$BUILD/python/pcops/_C.so
export PYTHONUNBUFFERED=1
declare -A RESULT
run_stage() {  # name, command...
  local name=$1; shift
  local t0=$SECONDS
  echo "=== $name: $*"
  if "$@" >"$OUT/$name.log" 2>&1; then RESULT[$name]="ok ($((SECONDS - t0)) s)"; else RESULT[$name]="FAILED rc=$? ($((SECONDS - t0)) s)"; fi
  tail -n 25 "$OUT/$name.log"
}
has() { [[ " $STAGES " == *" $1 "* ]]; }

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader || true
  (command -v nvcc || ls /usr/local/cuda/bin/nvcc) && $(command -v nvcc || echo /usr/local/cuda/bin/nvcc) --version | tail -1
  $PY -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
} 2>&1 | tee "$OUT/environment.txt"

if has build; then
  run_stage build bash -c "cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DPCOPS_WITH_CUDA=ON \
    -DPCOPS_BUILD_TESTS=ON -DPCOPS_BUILD_TORCH=ON -DCMAKE_CUDA_ARCHITECTURES='90a-real;90-virtual' \
    -DPython3_EXECUTABLE=$(command -v $PY) -DPCOPS_TEST_DATA_DIR=$PCOPS_DATA_DIR && cmake --build $BUILD -j $JOBS"
fi
if has cpu; then
  run_stage cpu_ctest bash -c "cd $BUILD && ctest --output-on-failure --no-tests=error -j $JOBS -LE 'cuda|consumer'"
fi
if has gtest; then
  run_stage cuda_gtest "$BUILD/tests/cuda/pcops_cuda_tests" --gtest_output=json:"$OUT/cuda_gtest.json"
fi
if has pytest; then
  run_stage cuda_pytest $PY -m pytest -q tests/cuda/python -p no:cacheprovider
fi
if has sanitize; then
  # The sanitizers run the CUDA gtest on its small cases (large clouds take too long under them).
  FILTER=${PCOPS_SANITIZE_FILTER:--*Large*:*Million*:*GridPath*:*BigClusterPath*:*ExchangeTags*:*AllPoints*:*Timing*:*Shell200k*:*Shell100k*:*RealClouds*:*SortedPathSizes*:*SortedKernels*}
  for tool in memcheck initcheck; do
    run_stage "sanitize_$tool" timeout ${PCOPS_SANITIZE_TIMEOUT:-200} compute-sanitizer --tool $tool \
      --error-exitcode 99 "$BUILD/tests/cuda/pcops_cuda_tests" --gtest_filter="$FILTER"
  done
  # racecheck is much slower: the tests that cover every shared-memory kernel (warp top-k and grid
  # search of kNN, both ball-query paths, FPS cluster (distributed shared memory) and grid paths).
  RACE=${PCOPS_RACECHECK_FILTER:-CudaKnn.UniformBothPaths:CudaKnn.DuplicateHeavyTies:CudaKnn.KEqualsNAndPathBoundaries:CudaBallQuery.UniformScanAllK:CudaBallQuery.GridUniformAndCellBoundaries:CudaBallQuery.GridDuplicatesOverflowTheBuffer:CudaBallQuery.BackwardMatchesCpuBits:CudaFurthestPointSample.ShortRunsOfEveryPathForSanitizers:CudaFurthestPointSample.SortedPathShortRunForSanitizers:CudaRadius.ExactTiesAtTheBoundary:CudaNearest.PathsTiesEmptyAndNonFinite:CudaThreeInterpolate.ManySourcesPerTargetAndPadding:CudaGroupPoints.BallQueryLikeNeighbourhoods:CudaNearestNeighbor.ExactTiesAndDuplicates:CudaIvfPq.SingleQueryAndCodeWidths:CudaIvfPq.CoarseTiesByListNumber:CudaVoxelize.KeyWidthsAndLongRuns:CudaScatter.ChunkRuleListsAroundTheChunkLength:CudaScatterStats.*:CudaPointConv.ShortCasesForSanitizers:CudaPointConvMma.ForwardReadsTheWeightGradientsGrouping}
  run_stage sanitize_racecheck timeout ${PCOPS_RACECHECK_TIMEOUT:-420} compute-sanitizer --tool racecheck \
    --racecheck-report all --error-exitcode 99 "$BUILD/tests/cuda/pcops_cuda_tests" --gtest_filter="$RACE"
  # point_conv's tensor-core kernels with the weight gradient on each choice (mma.sync, wgmma,
  # wgmma256 the default; the memcheck / initcheck stages above reach them through the MMA test's
  # own last part).
  for vvor in mma wgmma wgmma256; do
    run_stage "sanitize_racecheck_vvor_$vvor" env PCOPS_CUDA_POINT_CONV_FAST_VVOR=$vvor timeout 200 \
      compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 99 \
      "$BUILD/tests/cuda/pcops_cuda_tests" --gtest_filter=CudaPointConvMma.OutputsOnRequest
  done
  # The wgmma MVMR's crossing runs summed by pairs of warps meeting at mbarriers of their own (the
  # tests run every wgmma shape with the pairs and with the block's turns), and its weight stages
  # bulk-copied or loaded row by row; one shape a run (the tests read PCOPS_CUDA_POINT_CONV_CONFIG).
  for tool in racecheck synccheck; do
    for shape in 128x128x64x32x4w 128x128x64x64x2w 128x256x64x64x2w; do
      run_stage "sanitize_${tool}_pairs_bulk_$shape" env PCOPS_CUDA_POINT_CONV_CONFIG=$shape timeout 300 \
        compute-sanitizer --tool $tool --error-exitcode 99 "$BUILD/tests/cuda/pcops_cuda_tests" \
        --gtest_filter='CudaPointConvMma.SumPairsGiveTheTurnsBits:CudaPointConvMma.BulkWeightStagesGiveTheSameBits'
    done
  done
fi
if has bench; then
  run_stage cuda_probe timeout 240 $PY benchmarks/scripts/cuda_probe.py --json "$OUT/cuda_probe.json"
  run_stage fps_tune timeout 120 $PY benchmarks/scripts/fps_tune.py 1M 4M
  # The per-phase cost of a sorted-path FPS step (development build of the kernel with clock64 stamps).
  run_stage fps_trace bash -c "nvcc -std=c++20 -O3 -arch=sm_90 -DPCOPS_FPS_TRACE -Iinclude -Isrc \
    benchmarks/scripts/fps_trace.cu $BUILD/libpcops_cuda.a $BUILD/libpcops.a -o $OUT/fps_trace && \
    for c in sorted sorted256; do echo \"-- \$c\"; PCOPS_CUDA_FPS_CONFIG=\$c timeout 60 $OUT/fps_trace; done"
  run_stage cuda_bench timeout ${PCOPS_BENCH_TIMEOUT:-300} $PY -m pcops.cli bench --device cuda --no-progress \
    --out "$OUT" --docs "$OUT/benchmarks-cuda.md" --ops fps,knn,ball_query --clouds sphere,scan \
    --sizes ${PCOPS_BENCH_SIZES:-100k,1M}
  run_stage graph_probe timeout 240 $PY benchmarks/scripts/graph_probe_cuda.py --json "$OUT/graph_probe_cuda.json"
  run_stage chamfer_probe timeout 180 $PY benchmarks/scripts/chamfer_probe.py --device cuda --repeat 5 \
    --json "$OUT/chamfer_probe_cuda.json"
  run_stage scatter_probe timeout 180 $PY benchmarks/scripts/scatter_probe.py --device cuda --repeat 5 \
    --out "$OUT/scatter_probe_cuda.json"
  # faiss-cpu for the IVF-PQ probe on a host without network: PCOPS_FAISS_WHEEL=<a faiss_cpu wheel>
  # (pip download faiss-cpu --no-deps --only-binary=:all: --python-version 3.12 where there is network).
  if [[ -n "${PCOPS_FAISS_WHEEL:-}" ]]; then
    $PY -m pip install -q --no-deps --target "$OUT/faiss" "$PCOPS_FAISS_WHEEL" && export PYTHONPATH=$PYTHONPATH:$OUT/faiss
  fi
  run_stage ivfpq_probe timeout 240 $PY benchmarks/scripts/ivfpq_cuda_probe.py --out "$OUT/ivfpq_cuda_probe.json"
  run_stage interp_bench timeout 180 $PY -m pcops.cli bench --device cuda --no-progress --out "$OUT/interp" \
    --docs "$OUT/interp/benchmarks-cuda.md" --ops three_nn,three_interpolate --clouds sphere,scan --orders random
  # point_conv at ScanNet-like size: the exact path in float32 (and with the tiles MVMR and the
  # 1 x 2 weight gradient, and with uniform 2 x 4 weight-gradient tiles), the tensor-core path in
  # bf16; gather-GEMM-scatter in PyTorch in the same runs.
  PC="$PY benchmarks/scripts/point_conv_probe.py --device cuda --points 165000 --k 16"
  run_stage point_conv_exact timeout 150 $PC --channels 32,64,128,256 --out "$OUT/point_conv_exact.json"
  run_stage point_conv_tiles timeout 150 env PCOPS_CUDA_POINT_CONV_MVMR=tiles PCOPS_CUDA_POINT_CONV_VVOR=2 \
    $PC --channels 128,256 --out "$OUT/point_conv_exact_tiles.json"
  run_stage point_conv_2x4 timeout 150 env PCOPS_CUDA_POINT_CONV_VVOR=2x4 $PC --channels 32,64,128,256 \
    --out "$OUT/point_conv_exact_2x4.json"
  run_stage point_conv_fast timeout 150 $PC --channels 32,64,128,256,512 --dtype bfloat16 --mode fast \
    --out "$OUT/point_conv_fast.json"
  # Each part of the fast path alone with the crossing runs' sums by pairs of warps or in turns, and
  # with the weight stages bulk-copied or loaded row by row.
  run_stage point_conv_sum_pairs timeout 200 $PY benchmarks/scripts/point_conv_kernels.py --device cuda \
    --points 165000 --channels 256,512 --dtype bfloat16 --mode fast --rounds 2 --sum-pairs 0,1 --bulk-w 0,1 \
    --out "$OUT/point_conv_sum_pairs.json"
  # The wgmma MVMR shapes against each other (256 channels a block on four warpgroups, the default
  # from 193 to 256 channels; 128 a block with stages of 32 or 64 channels).
  run_stage point_conv_mvmr_256 timeout 200 $PY benchmarks/scripts/point_conv_kernels.py --device cuda \
    --points 165000 --channels 256,512 --dtype bfloat16 --mode fast --rounds 2 \
    --mvmr 128x256x64x64x2w,128x128x64x32x4w,128x128x64x64x2w --out "$OUT/point_conv_mvmr_256.json"
  run_stage conv_bench timeout 200 $PY -m pcops.cli bench --device cuda --no-progress --out "$OUT/conv" \
    --docs "$OUT/conv/benchmarks-cuda.md" --ops point_conv --sizes 165k --channels 128 --clouds sphere,mesh
fi

echo
echo "=== summary"
status=0
for k in "${!RESULT[@]}"; do
  printf '%-20s %s\n' "$k" "${RESULT[$k]}"
  [[ ${RESULT[$k]} == ok* ]] || status=1
done | sort
for k in "${!RESULT[@]}"; do [[ ${RESULT[$k]} == ok* ]] || status=1; done
exit $status
