#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>


namespace deepinfer {

void RmsNorm(const float* x, const float* w, float eps, int m, int n, float* y) {
  // The sum of squares is accumulated in double (the one reduction where f32 drift shows at large n), in element
  // order: a chain of dependent adds, latency-bound. Rows are independent, so kRows of them go at once, each its
  // own chain in the same order (bitwise what one row alone gives; a float x float product is exact in double,
  // so contracting it into an FMA changes nothing either).
  constexpr int kRows = 8;
  double ss[kRows];
  for (int i0 = 0; i0 < m; i0 += kRows) {
    const int rows = std::min(kRows, m - i0);
    const float* xr = x + static_cast<int64_t>(i0) * n;
    if (rows == kRows) {
      for (int k = 0; k < kRows; ++k) ss[k] = 0;
      for (int j = 0; j < n; ++j)
        for (int k = 0; k < kRows; ++k) {
          const double v = xr[static_cast<int64_t>(k) * n + j];
          ss[k] += v * v;
        }
    } else {
      for (int k = 0; k < rows; ++k) {
        double s = 0;
        for (int j = 0; j < n; ++j) s += static_cast<double>(xr[static_cast<int64_t>(k) * n + j]) * xr[static_cast<int64_t>(k) * n + j];
        ss[k] = s;
      }
    }
    for (int k = 0; k < rows; ++k) {
      const float* xk = xr + static_cast<int64_t>(k) * n;
      float* yk = y + static_cast<int64_t>(i0 + k) * n;
      const float scale = static_cast<float>(1.0 / std::sqrt(ss[k] / n + eps));
      for (int j = 0; j < n; ++j) yk[j] = xk[j] * scale * w[j];
    }
  }
}

RopeTable RopeTable::Make(RopeStyle style, int rot_dim, double theta, const std::vector<float>& freq_factors,
                          const YarnParams& yarn) {
  RopeTable t;
  t.style = style;
  t.rot_dim = rot_dim;
  t.inv_freq.resize(rot_dim / 2);
  double low = 0, high = 0;
  if (yarn.factor > 1) {  // the dims whose wavelength fits beta_fast .. beta_slow rotations in the original context
    auto corr = [&](double rotations) {
      return rot_dim * std::log(yarn.original_ctx / (rotations * 2 * M_PI)) / (2 * std::log(theta));
    };
    low = corr(yarn.beta_fast);
    high = corr(yarn.beta_slow);
    if (yarn.truncate) low = std::floor(low), high = std::ceil(high);
    low = std::max(0.0, low);
    high = std::min(rot_dim - 1.0, high);
    t.mscale = yarn.mscale;
  }
  for (int i = 0; i < rot_dim / 2; ++i) {
    double f = std::pow(theta, -2.0 * i / rot_dim);
    if (!freq_factors.empty()) f /= freq_factors[i];
    if (yarn.factor > 1) {
      const double ramp = 1 - std::clamp((i - low) / std::max(0.001, high - low), 0.0, 1.0);  // 1: keep original
      f = f / yarn.factor * (1 - ramp) + f * ramp;
    }
    t.inv_freq[i] = static_cast<float>(f);
  }
  return t;
}

void ApplyRope(const RopeTable& t, float* x, int m, int n_heads, int head_dim, const int32_t* pos) {
  const int half = t.rot_dim / 2;
  std::vector<float> cs(half), sn(half);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < half; ++j) {
      const double a = static_cast<double>(pos[i]) * t.inv_freq[j];
      cs[j] = static_cast<float>(std::cos(a)) * t.mscale;
      sn[j] = static_cast<float>(std::sin(a)) * t.mscale;
    }
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + (static_cast<int64_t>(i) * n_heads + h) * head_dim;
      for (int j = 0; j < half; ++j) {
        const int a = t.style == RopeStyle::kAdjacentPairs ? 2 * j : j;
        const int b = t.style == RopeStyle::kAdjacentPairs ? 2 * j + 1 : j + half;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * cs[j] - x1 * sn[j];
        v[b] = x0 * sn[j] + x1 * cs[j];
      }
    }
  }
}

void SwiGLU(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.f + std::exp(-gate[i])) * up[i];
}

void GeGLU(const float* gate, const float* up, float* out, int64_t n) {
  // ggml_gelu_f32's expression (HF's gelu_pytorch_tanh), computed exactly rather than through llama.cpp's f16
  // lookup table (which rounds the input and the result to f16: ~2^-11 relative).
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f, kCoefA = 0.044715f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    out[i] = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kCoefA * x * x))) * up[i];
  }
}

void SwiGluOai(const float* gate, const float* up, float* out, int64_t n) {
  // ggml_vec_swiglu_oai's expression in f32 with expf (the constants are llama.cpp's and HF's, not in any config).
  constexpr float kAlpha = 1.702f, kLimit = 7.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = std::min(gate[i], kLimit);
    const float y = std::clamp(up[i], -kLimit, kLimit);
    out[i] = x / (1.f + std::exp(kAlpha * (-x))) * (y + 1.f);
  }
}

void Softmax(float* x, int n) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int i = 0; i < n; ++i) x[i] *= inv;
}

void LogSoftmax(const float* x, float* out, int n) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - mx);
  const float lse = mx + static_cast<float>(std::log(sum));
  for (int i = 0; i < n; ++i) out[i] = x[i] - lse;
}

}  // namespace deepinfer
