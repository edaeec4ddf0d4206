#pragma once
// Which instruction set the furthest point sampling kernels use. Every set computes the same
// bits; the choice is made once from the CPU. Tests force each available set in turn.
namespace pcops::cpu::fps_detail {

enum class Isa { Generic = 0, Avx2 = 1, Avx512 = 2 };

// The best set this CPU supports.
Isa best_isa();
// Forces `isa` (clamped to best_isa()) for later calls; returns the set in use before.
// Not meant to be called while a sampling call runs.
Isa force_isa(Isa isa);

}  // namespace pcops::cpu::fps_detail
