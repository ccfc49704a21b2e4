// MLA absorption GEMMs through CLBlast's strided-batched GEMM (one batch entry per head):
// y[t, h, :out] = alpha * x[t, h, :in] x W[h]. Row-major; per head h the A operand starts at
// x + h*in with leading dimension x_row_stride, B at W + h*in*out, C at y + h*out. Kept off
// the attention kernels' path: the engine calls it before (W_UK) and after (W_UV) mla_run.
// Without CLBlast at build time (CLATTN_HAVE_CLBLAST undefined) both calls are Unsupported.
#include <cmath>

#include "backends/ops/op_util.hpp"
#include "clattn/mla.hpp"
#include "runtime/log.hpp"

#ifdef CLATTN_HAVE_CLBLAST
#include <clblast.h>
#include <clblast_half.h>

#include "backends/ops/clblast_context.hpp"
#endif

namespace clattn {

namespace {
using std::to_string;

void check_absorb(const AbsorbArgs& a) {
  if (a.num_tokens < 0) rt::invalid("absorb: num_tokens = " + to_string(a.num_tokens) + ", must be >= 0");
  if (a.num_heads < 1) rt::invalid("absorb: num_heads = " + to_string(a.num_heads) + ", must be >= 1");
  if (a.in_dim < 1 || a.out_dim < 1)
    rt::invalid("absorb: in_dim = " + to_string(a.in_dim) + ", out_dim = " + to_string(a.out_dim) + ", must be >= 1");
  if (a.dtype != DType::F32 && a.dtype != DType::F16)
    throw Error(Status::Unsupported, "absorb: dtype " + std::string(dtype_name(a.dtype)) + " unsupported (f32, f16)");
  if (!std::isfinite(a.alpha)) rt::invalid("absorb: alpha is not finite");
  const int64_t H = a.num_heads;
  if (a.x_row_stride && a.x_row_stride < H * a.in_dim)
    rt::invalid("absorb: x_row_stride = " + to_string(a.x_row_stride) + " < num_heads * in_dim = " +
                to_string(H * a.in_dim));
  if (a.y_row_stride && a.y_row_stride < H * a.out_dim)
    rt::invalid("absorb: y_row_stride = " + to_string(a.y_row_stride) + " < num_heads * out_dim = " +
                to_string(H * a.out_dim));
}
}  // namespace

#ifdef CLATTN_HAVE_CLBLAST
namespace {
template <class T>
clblast::StatusCode gemm(const AbsorbArgs& a, T alpha, T beta, int64_t ldx, int64_t ldy, cl_command_queue* q,
                         cl_event* ev) {
  const size_t H = size_t(a.num_heads), in = size_t(a.in_dim), out = size_t(a.out_dim);
  // B = W[h]: [in, out] (ld out) or, transposed, [out, in] read as its transpose (ld in).
  const auto tb = a.w_transposed ? clblast::Transpose::kYes : clblast::Transpose::kNo;
  const size_t ldw = a.w_transposed ? in : out;
  return clblast::GemmStridedBatched<T>(clblast::Layout::kRowMajor, clblast::Transpose::kNo, tb, size_t(a.num_tokens),
                                        out, in, alpha, a.x, 0, size_t(ldx), in, a.w, 0, ldw, in * out, beta, a.y, 0,
                                        size_t(ldy), out, H, q, ev);
}
}  // namespace

void mla_absorb(const Context& ctx, const AbsorbArgs& a, const Enqueue& e) {
  check_absorb(a);
  const DeviceProfile& prof = ctx.profile();
  if (a.dtype == DType::F16 && !prof.fp16)
    throw Error(Status::Unsupported, "absorb: f16 GEMM needs cl_khr_fp16, which " + prof.device_name + " lacks");
  const int64_t H = a.num_heads, T = a.num_tokens;
  namespace ck = rt::checked;
  const int64_t ldx = a.x_row_stride ? a.x_row_stride : ck::mul(H, a.in_dim, "absorb x row");
  const int64_t ldy = a.y_row_stride ? a.y_row_stride : ck::mul(H, a.out_dim, "absorb y row");
  const int64_t es = int64_t(dtype_size(a.dtype));
  if (T > 0) {
    // Bytes up to the end of the last row: (T - 1) rows of stride ld, then H x dim values.
    auto rows = [&](int64_t ld, int64_t dim, const char* what) {
      return ck::mul(ck::add(ck::mul(T - 1, ld, what), ck::mul(H, dim, what), what), es, what);
    };
    ops::require_buffer(a.x, rows(ldx, a.in_dim, "absorb x bytes"), "absorb x", {{T, H, a.in_dim}, dtype_name(a.dtype)});
    ops::require_buffer(a.w, ck::product({H, a.in_dim, a.out_dim, es}, "absorb w bytes"), "absorb w",
                        {{H, a.in_dim, a.out_dim}, dtype_name(a.dtype)});
    ops::require_buffer(a.y, rows(ldy, a.out_dim, "absorb y bytes"), "absorb y", {{T, H, a.out_dim}, dtype_name(a.dtype)});
  }
  cl_command_queue q = ops::queue_of(ctx, e);
  ops::clblast_programs_follow(ctx);
  // CLBlast takes no wait list: a barrier makes its commands wait for the caller's events.
  if (e.num_wait > 0)
    rt::check_cl(clEnqueueBarrierWithWaitList(q, e.num_wait, e.wait, nullptr), "clEnqueueBarrierWithWaitList",
                 "absorb wait list");
  if (T == 0) {
    if (e.event) rt::check_cl(clEnqueueMarkerWithWaitList(q, 0, nullptr, e.event), "clEnqueueMarkerWithWaitList");
    return;
  }
  clblast::StatusCode s;
  if (a.dtype == DType::F32)
    s = gemm<float>(a, a.alpha, 0.0f, ldx, ldy, &q, e.event);
  else
    s = gemm<half>(a, FloatToHalf(a.alpha), FloatToHalf(0.0f), ldx, ldy, &q, e.event);
  if (s != clblast::StatusCode::kSuccess)
    throw Error(int(s) < 0 && int(s) > -1000 ? Status::OpenCLError : Status::Internal,
                "absorb: clblast::GemmStridedBatched failed with CLBlast status " + to_string(int(s)) + " (T=" +
                    to_string(T) + ", H=" + to_string(H) + ", " + to_string(a.in_dim) + "->" +
                    to_string(a.out_dim) + ", " + dtype_name(a.dtype) + ")",
                int(s) < 0 && int(s) > -1000 ? int(s) : 0);
}

bool mla_absorb_warmup(const Context& ctx, bool f32, bool f16) {
  bool ok = true;
  for (DType dt : {DType::F32, DType::F16}) {
    if ((dt == DType::F32 && !f32) || (dt == DType::F16 && !f16)) continue;
    try {
      const size_t es = dtype_size(dt);
      DeviceBuffer x(ctx, 2 * 8 * es), w(ctx, 2 * 8 * 8 * es), y(ctx, 2 * 8 * es);
      x.fill_bytes(ctx, 0), w.fill_bytes(ctx, 0);
      AbsorbArgs a;
      a.num_tokens = 1, a.num_heads = 2, a.in_dim = 8, a.out_dim = 8, a.dtype = dt;
      a.x = x.get(), a.w = w.get(), a.y = y.get();
      mla_absorb(ctx, a);
      rt::check_cl(clFinish(ctx.cl_queue()), "clFinish", "absorb warm-up");
    } catch (const Error& err) {
      rt::log().warn("mla_absorb_warmup: {} GEMM unavailable: {}", dtype_name(dt), err.what());
      ok = false;
    }
  }
  return ok;
}

#else  // no CLBlast

void mla_absorb(const Context&, const AbsorbArgs& a, const Enqueue&) {
  check_absorb(a);
  throw Error(Status::Unsupported, "absorb: clattn was built without CLBlast (install libclblast-dev and rebuild)");
}
bool mla_absorb_warmup(const Context&, bool, bool) { return false; }

#endif

}  // namespace clattn
