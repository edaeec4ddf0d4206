// Furthest point sampling step kernels, written once over 16-lane vector operations and
// included by furthest_point_sample.cpp once per instruction set (no include guard on purpose):
// the including file defines vf, vi, vload, vsub, ... for that set and wraps the include in the
// matching `#pragma GCC target` and namespace.
//
// Arithmetic follows the contract: d = fl(q - x), s = fl(fl(fl(dx*dx) + fl(dy*dy)) + fl(dz*dz))
// with separate multiply and add instructions (no FMA), m = (s < m) ? s : m.

// Leaf j of the tree: update its points' m with centre (cx, cy, cz), then store the leaf's
// (largest m, smallest index attaining it) in level 0.
inline void fps_leaf_update(FpsTree& T, int64_t j, const vf cx, const vf cy, const vf cz) {
  vf mk[kFpsLeaf / kFpsLanes];
  vf best = vset1(-1.0f);
  for (int k = 0; k < kFpsLeaf / kFpsLanes; ++k) {
    const int64_t p = j * kFpsLeaf + k * kFpsLanes;
    const vf dx = vsub(cx, vload(T.x.data + p));
    const vf dy = vsub(cy, vload(T.y.data + p));
    const vf dz = vsub(cz, vload(T.z.data + p));
    const vf s = vadd(vadd(vmul(dx, dx), vmul(dy, dy)), vmul(dz, dz));
    const vf m = vmin(s, vload(T.m.data + p));
    vstore(T.m.data + p, m);
    mk[k] = m;
    best = vmax(best, m);
  }
  const float mx = vreduce_max(best);
  const vf vmx = vset1(mx);
  int32_t arg = INT32_MAX;
  for (int k = 0; k < kFpsLeaf / kFpsLanes; ++k) {
    const int32_t a = vmasked_min(vcmpeq(mk[k], vmx), viload(T.idx.data + j * kFpsLeaf + k * kFpsLanes));
    arg = a < arg ? a : arg;
  }
  T.level[0].maxm[j] = mx;
  T.level[0].arg[j] = arg;
}

// Node i of level l >= 1: descend into the children (level l-1, slots 16i..16i+15) whose box lower
// bound is below their largest m, then refresh the node's own (largest m, smallest index).
void fps_visit(FpsTree& T, int l, int64_t i, float qx, float qy, float qz) {
  FpsLevel& ch = T.level[l - 1];
  const int64_t o = i * kFpsLanes;
  const vf cx = vset1(qx), cy = vset1(qy), cz = vset1(qz), zero = vset1(0.0f);
  // Lower bound of s over each child box: the contract's operations applied to the box gap.
  const vf gx = vmax(vmax(vsub(vload(ch.lox.data + o), cx), vsub(cx, vload(ch.hix.data + o))), zero);
  const vf gy = vmax(vmax(vsub(vload(ch.loy.data + o), cy), vsub(cy, vload(ch.hiy.data + o))), zero);
  const vf gz = vmax(vmax(vsub(vload(ch.loz.data + o), cz), vsub(cz, vload(ch.hiz.data + o))), zero);
  const vf lb = vadd(vadd(vmul(gx, gx), vmul(gy, gy)), vmul(gz, gz));
  uint32_t todo = vcmpgt(vload(ch.maxm.data + o), lb);
  if (!todo) return;
  while (todo) {
    const int s = __builtin_ctz(todo);
    todo &= todo - 1;
    if (l == 1) {
      fps_leaf_update(T, o + s, cx, cy, cz);
    } else {
      fps_visit(T, l - 1, o + s, qx, qy, qz);
    }
  }
  const vf mm = vload(ch.maxm.data + o);
  const float mx = vreduce_max(mm);
  T.level[l].maxm[i] = mx;
  T.level[l].arg[i] = vmasked_min(vcmpeq(mm, vset1(mx)), viload(ch.arg.data + o));
}

void fps_tree_steps(FpsTree& T, const PointsView& P, int64_t b, int64_t start, int64_t steps,
                    int64_t* o) {
  const int top = T.top;
  int64_t c = start;
  for (int64_t t = 0; t < steps; ++t) {
    o[t] = c;
    if (t + 1 == steps) break;
    fps_visit(T, top, 0, P.at(b, c, 0), P.at(b, c, 1), P.at(b, c, 2));
    c = T.level[top].arg[0];
    if (T.level[top].maxm[0] == 0.0f) {
      // Every m_j is 0: no later centre changes anything, so this index repeats.
      for (int64_t u = t + 1; u < steps; ++u) o[u] = c;
      break;
    }
  }
}

void fps_plain_steps(FpsPlain& S, const PointsView& P, int64_t b, int64_t start, int64_t steps,
                     int64_t* o) {
  const int64_t D = P.dim;
  const int64_t E = S.size, padded = S.padded;
  const float* X = S.coords.data;
  float* m = S.m.data;
  const vf inf = vset1(INFINITY), zero = vset1(0.0f);
  const vi lane = viota();
  int64_t c = start;
  for (int64_t t = 0; t < steps; ++t) {
    o[t] = c;
    if (t + 1 == steps) break;
    if (E == 0) {  // no eligible point: the definition's fallback index 0
      for (int64_t u = t + 1; u < steps; ++u) o[u] = 0;
      break;
    }
    for (int64_t d = 0; d < D; ++d) S.q[d] = P.at(b, c, d);
    const vf qx = vset1(S.q[0]), qy = vset1(D > 1 ? S.q[1] : 0.0f), qz = vset1(D > 2 ? S.q[2] : 0.0f);
    vf best = vset1(-1.0f);
    vi bpos = viset1(0);
    for (int64_t p = 0; p < padded; p += kFpsLanes) {
      vf s;
      if (D == 3) {
        const vf dx = vsub(qx, vload(X + p));
        const vf dy = vsub(qy, vload(X + padded + p));
        const vf dz = vsub(qz, vload(X + 2 * padded + p));
        s = vadd(vadd(vmul(dx, dx), vmul(dy, dy)), vmul(dz, dz));
      } else {
        vf dd = vsub(qx, vload(X + p));
        s = vmul(dd, dd);
        for (int64_t d = 1; d < D; ++d) {
          dd = vsub(vset1(S.q[d]), vload(X + d * padded + p));
          s = vadd(s, vmul(dd, dd));
        }
      }
      s = vblend(vcmplt(s, inf), s, zero);  // a non-finite s (NaN or +inf) counts as 0
      const vf mm = vmin(s, vload(m + p));
      vstore(m + p, mm);
      const uint32_t gt = vcmpgt(mm, best);
      best = vblend(gt, mm, best);
      bpos = viblend(gt, viadd(lane, static_cast<int32_t>(p)), bpos);
    }
    const float mx = vreduce_max(best);
    const int32_t pos = vmasked_min(vcmpeq(best, vset1(mx)), bpos);
    c = S.idx.empty() ? pos : S.idx[static_cast<size_t>(pos)];
  }
}
