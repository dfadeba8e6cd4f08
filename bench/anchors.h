// The anchor workloads of the benchmarks (the compiler issue's list).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

namespace tunefarm::bench {

struct Anchor {
  const char* name;
  const char* spec;
};

inline const std::vector<Anchor>& KernelAnchors() {
  static const std::vector<Anchor> anchors = {
      {"gemm_512", "matmul(M=512,N=512,K=512)"},
      {"gemm_1024", "matmul(M=1024,N=1024,K=1024)"},
      {"gemm_128x3072x768", "matmul(M=128,N=3072,K=768)"},
      // A transformer's layers: a linear layer exported as Gemm (constant
      // weight [N, K]), the attention scores Q x K^T of 12 heads and their
      // product with V, a 49-token window (odd rows) and a ViT's 197
      // tokens (a prime).
      {"dense_128x3072x768", "dense(M=128,N=3072,K=768)"},
      {"bmm_attn_scores_12x128x128x64", "batch_matmul(B=12,M=128,N=128,K=64)"},
      {"bmm_attn_values_12x128x64x128", "batch_matmul(B=12,M=128,N=64,K=128)"},
      {"gemm_49x384x96", "matmul(M=49,N=384,K=96)"},
      {"gemm_197x768x768", "matmul(M=197,N=768,K=768)"},
      {"resnet_c64_h56_3x3", "conv2d_nchw(N=1,C=64,H=56,W=56,K=64,R=3,S=3,pad=1)"},
      {"resnet_c128_h28_3x3", "conv2d_nchw(N=1,C=128,H=28,W=28,K=128,R=3,S=3,pad=1)"},
      {"resnet_c256_h14_3x3", "conv2d_nchw(N=1,C=256,H=14,W=14,K=256,R=3,S=3,pad=1)"},
      {"resnet_c512_h7_3x3", "conv2d_nchw(N=1,C=512,H=7,W=7,K=512,R=3,S=3,pad=1)"},
      {"resnet_c64_c128_h56_1x1_s2", "conv2d_nchw(N=1,C=64,H=56,W=56,K=128,R=1,S=1,stride=2)"},
      {"yolo_c32_h160_3x3_s2", "conv2d_nchw(N=1,C=32,H=160,W=160,K=64,R=3,S=3,stride=2,pad=1)"},
      {"yolo_c128_h40_1x1", "conv2d_nchw(N=1,C=128,H=40,W=40,K=128,R=1,S=1)"},
      // Channel counts off the vector width: ShuffleNetV2's 1x1 layers
      // (58/116/232, 2 x 29 x 2^k) and a DenseNet layer (growth 32).
      {"shufflenet_c58_h28_1x1", "conv2d_nchw(N=1,C=58,H=28,W=28,K=58,R=1,S=1)"},
      {"shufflenet_c116_h14_1x1", "conv2d_nchw(N=1,C=116,H=14,W=14,K=116,R=1,S=1)"},
      {"shufflenet_c232_h7_1x1", "conv2d_nchw(N=1,C=232,H=7,W=7,K=232,R=1,S=1)"},
      {"densenet_c128_h14_3x3_k32", "conv2d_nchw(N=1,C=128,H=14,W=14,K=32,R=3,S=3,pad=1)"},
      {"densenet_c96_h56_1x1_k128", "conv2d_nchw(N=1,C=96,H=56,W=56,K=128,R=1,S=1)"},
      {"densenet_c256_h56_1x1_k128", "conv2d_nchw(N=1,C=256,H=56,W=56,K=128,R=1,S=1)"},
      {"mbv2_dw_c144_h56", "depthwise_conv2d_nchw(N=1,C=144,H=56,W=56,R=3,S=3,pad=1)"},
      {"mbv2_dw_c576_h14", "depthwise_conv2d_nchw(N=1,C=576,H=14,W=14,R=3,S=3,pad=1)"},
      // Reductions and normalizations: rows (PP-OCR rec's LayerNorm, a
      // transformer's), spatial means, a max across NCHW channels.
      {"rec_layer_norm_40x120", "layer_norm(A=40,N=120)"},
      {"layer_norm_128x768", "layer_norm(A=128,N=768)"},
      {"instance_norm_c64_h56", "instance_norm(A=64,N=3136)"},
      {"reduce_mean_rows_128x768", "reduce_mean(A=128,N=768)"},
      {"reduce_mean_c512_h7", "reduce_mean(A=512,N=49)"},
      {"reduce_max_channels_c256_h56", "reduce_max(A=1,N=256,B=3136)"},
      {"reduce_l2_rows_512x1024", "reduce_l2(A=512,N=1024)"},
      {"reduce_prod_rows_4096x16", "reduce_prod(A=4096,N=16)"},
  };
  return anchors;
}

// --only: a comma-separated list of substrings; empty selects every anchor.
inline bool Selected(const std::string& name, const std::string& only) {
  if (only.empty()) return true;
  for (size_t start = 0; start <= only.size();) {
    size_t comma = std::min(only.find(',', start), only.size());
    if (comma > start && name.find(only.substr(start, comma - start)) != std::string::npos)
      return true;
    start = comma + 1;
  }
  return false;
}

}  // namespace tunefarm::bench
