#pragma once
// Which kernels the IVF-PQ distance tables use: AVX-512 when the CPU has it, else AVX2, else scalar
// code. All compute the same bits; tests force the narrower paths to check that.
namespace pcops::cpu::ivfpq_detail {

// Forces the scalar kernels (true) or restores the automatic choice (false); returns the previous
// setting. Not meant to be called while an index call runs.
bool force_scalar(bool on);
// Forces the AVX2 kernels where the AVX-512 ones would run (true) or restores the automatic
// choice (false); returns the previous setting. force_scalar takes precedence.
bool force_avx2(bool on);

}  // namespace pcops::cpu::ivfpq_detail
