#pragma once
// Which kernels the IVF-PQ distance tables use: AVX2 when the CPU has it, else scalar code. Both
// compute the same bits; tests force the scalar path to check that.
namespace pcops::cpu::ivfpq_detail {

// Forces the scalar kernels (true) or restores the automatic choice (false); returns the previous
// setting. Not meant to be called while an index call runs.
bool force_scalar(bool on);

}  // namespace pcops::cpu::ivfpq_detail
