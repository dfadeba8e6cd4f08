// The tensor-core code checked against the documents, not against our own
// interpreter: known-answer tables transcribed from NVIDIA's PTX ISA (and,
// where the ISA gives only a figure, from CUTLASS's CuTe layouts, which
// encode the same hardware facts), asserted equal to
//   - the SIMT interpreter's tables (tests/compiler/gpu_sim.h: the lane
//     layouts it runs mma.sync, ldmatrix and wgmma with),
//   - the compiler's own functions (fragment sizes, ldmatrix lane rows and
//     .x/.trans choices in lowered programs, the swizzle, the wgmma
//     descriptors' fields as emitted),
//   - the CUDA prelude's index and packing helpers, compiled as host C++
//     with threadIdx and shared-address stubs,
// and every inline-asm statement the CUDA back end emits checked against
// its instruction's operand list in the ISA's syntax.
//
// Where the documents were read (the PTX ISA's section numbers move between
// releases; titles are stable): the PTX ISA 9.x pages at
// https://docs.nvidia.com/cuda/parallel-thread-execution/ —
//   [mma16816]  9.7.14.5.8  "Matrix Fragments for mma.m16n8k16 with floating
//                           point type" (Figures 79, 81, 83)
//   [mma1688]   9.7.14.5.7  "Matrix Fragments for mma.m16n8k8" (.tf32: Figures
//                           72, 75; accumulators: Figure 77)
//   [mma]       9.7.14.5.14 "Multiply-and-Accumulate Instruction: mma" (syntax)
//   [ldmatrix]  9.7.14.5.15 "Warp-level matrix load instruction: ldmatrix"
//                           (the .num address table, Figure 104)
//   [wgmma-d]   9.7.15.5.1.1.1 "Matrix Fragments for wgmma.mma_async.m64nNk16"
//                           (Figure 149: the D layout is an image only)
//   [wgmma-smem] 9.7.15.5.1.2 "Shared Memory Matrix Layout", its
//                           "Leading/Stride Dimension Byte Offset" and
//                           "Canonical Layouts" tables and worked examples
//   [desc]      9.7.15.5.1.2.2 "Matrix Descriptor Format"
//   [wgmma]     9.7.15.5.2  "Asynchronous Multiply-and-Accumulate Instruction:
//                           wgmma.mma_async" (syntax, imm-trans-a/b)
//   [cp.async]  "Data Movement and Conversion Instructions: cp.async" (syntax)
// and CUTLASS (github.com/NVIDIA/cutlass): include/cute/atom/mma_traits_sm80.hpp
// (SM80_16x8x16_F32F16F16F32_TN, SM80_16x8x8_F32TF32TF32F32_TN),
// include/cute/atom/copy_traits_sm75.hpp (SM75_U32x4_LDSM_N,
// SM75_U16x8_LDSM_T), include/cute/atom/mma_traits_sm90_gmma.hpp
// (CLayout_64xN, make_gmma_desc), include/cute/arch/mma_sm90_desc.hpp
// (GmmaDescriptor's bit fields). The tables are written here from those
// texts; no code of theirs is used.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "compiler/codegen/cuda_codegen.h"
#include "compiler/codegen/cuda_prelude.h"
#include "compiler/ir/compute.h"
#include "compiler/ir/stmt.h"
#include "compiler/ir/workload.h"
#include "compiler/ir/workload_spec.h"
#include "compiler/schedule/gpu_tensor_core.h"
#include "compiler/schedule/schedule.h"
#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"
#include "tests/compiler/gpu_sim.h"
#include "tests/testing/process.h"
#include "tests/testing/temp_dir.h"

namespace tunefarm {
namespace {

using RC = std::pair<int, int>;

// ===================================================================
// The documents' tables.
// ===================================================================
namespace isa {

// [mma16816], Multiplicand A, .f16/.bf16 ("four .f16x2 registers ...
// a0, a1, a2, a3, a4, a5, a6, a7", Figure 79):
//   groupID           = %laneid >> 2
//   threadID_in_group = %laneid % 4
//   row =      groupID            for ai where  0 <= i < 2 || 4 <= i < 6
//             groupID + 8         Otherwise
//   col =  (threadID_in_group * 2) + (i & 0x1)          for ai where i <  4
//          (threadID_in_group * 2) + (i & 0x1) + 8      for ai where i >= 4
RC M16n8k16A(int laneid, int i) {
  const int groupID = laneid >> 2, threadID_in_group = laneid % 4;
  const int row = ((0 <= i && i < 2) || (4 <= i && i < 6)) ? groupID : groupID + 8;
  const int col =
      i < 4 ? (threadID_in_group * 2) + (i & 0x1) : (threadID_in_group * 2) + (i & 0x1) + 8;
  return {row, col};
}
// [mma16816], Multiplicand B, .f16/.bf16 ("two .f16x2 registers ... b0, b1,
// b2, b3", Figure 81):
//   row =  (threadID_in_group * 2) + (i & 0x1)           for bi where i <  2
//          (threadID_in_group * 2) + (i & 0x1) + 8       for bi where i >= 2
//   col = groupID
RC M16n8k16B(int laneid, int i) {
  const int groupID = laneid >> 2, threadID_in_group = laneid % 4;
  const int row =
      i < 2 ? (threadID_in_group * 2) + (i & 0x1) : (threadID_in_group * 2) + (i & 0x1) + 8;
  return {row, groupID};
}
// [mma16816], Accumulators (C or D), .f32 ("four .f32 registers ... c0, c1,
// c2, c3", Figure 83); [mma1688] gives the same for .tf32's accumulators
// (Figure 77, "row = groupID for c0 and c1, groupID + 8 for c2 and c3"):
//   row =      groupID                               for ci where i <  2
//            groupID + 8                             for ci where i >= 2
//   col =  (threadID_in_group * 2) + (i & 0x1)        for ci where i = {0,..,3}
RC M16n8C(int laneid, int i) {
  const int groupID = laneid >> 2, threadID_in_group = laneid % 4;
  return {i < 2 ? groupID : groupID + 8, (threadID_in_group * 2) + (i & 0x1)};
}
// [mma1688], Multiplicand A, .tf32 ("four .b32 registers ... a0, a1, a2,
// a3", Figure 72):
//   row =      groupID            for a0 and a2
//              groupID + 8        for a1 and a3
//   col =  threadID_in_group       for a0 and a1
//          threadID_in_group + 4   for a2 and a3
RC M16n8k8Tf32A(int laneid, int i) {
  const int groupID = laneid >> 2, threadID_in_group = laneid % 4;
  return {(i == 0 || i == 2) ? groupID : groupID + 8,
          (i == 0 || i == 1) ? threadID_in_group : threadID_in_group + 4};
}
// [mma1688], Multiplicand B, .tf32 ("two .b32 registers ... b0, b1",
// Figure 75):
//   row =    threadID_in_group         for b0
//          threadID_in_group + 4       for b1
//   col =  groupID
RC M16n8k8Tf32B(int laneid, int i) {
  const int groupID = laneid >> 2, threadID_in_group = laneid % 4;
  return {i == 0 ? threadID_in_group : threadID_in_group + 4, groupID};
}

// A fragment's shape: the operand's rows x columns, elements a lane holds
// and 32-bit registers they take (the tables' "Fragment" columns).
struct Fragment {
  int rows, cols, elements, registers;
  RC (*place)(int, int);
};
// mma.m16n8k16 .f16/.bf16: A 16x16 (four .f16x2), B 16x8 (two .f16x2),
// C/D 16x8 (four .f32).
constexpr Fragment kA16{16, 16, 8, 4, M16n8k16A};
constexpr Fragment kB16{16, 8, 4, 2, M16n8k16B};
constexpr Fragment kC{16, 8, 4, 4, M16n8C};
// mma.m16n8k8 .tf32: A 16x8 (four .b32), B 8x8 (two .b32).
constexpr Fragment kATf32{16, 8, 4, 4, M16n8k8Tf32A};
constexpr Fragment kBTf32{8, 8, 2, 2, M16n8k8Tf32B};

// [ldmatrix]: "Addresses addr0–addr7 correspond to the rows of the first
// matrix, addresses addr8–addr15 correspond to the rows of the second
// matrix, and so on", given by the threads of the .num table:
//   .num | Threads 0–7 | Threads 8–15 | Threads 16–23 | Threads 24–31
//   .x1  | addr0–addr7 |      –       |      –        |      –
//   .x2  | addr0–addr7 | addr8–addr15 |      –        |      –
//   .x4  | addr0–addr7 | addr8–addr15 | addr16–addr23 | addr24–addr31
// The thread whose address is row `row` of matrix `matrix`; -1 where the
// .num has no such matrix.
int LdmatrixAddressThread(int num, int matrix, int row) {
  static const int kFirstThread[3][4] = {{0, -1, -1, -1}, {0, 8, -1, -1}, {0, 8, 16, 24}};
  const int* t = kFirstThread[num == 1 ? 0 : num == 2 ? 1 : 2];
  return t[matrix] < 0 ? -1 : t[matrix] + row;
}
// [ldmatrix], Figure 104 ("ldmatrix fragment layout for one 8x8 Matrix with
// 16-bit elements"): "Each thread in a warp loads fragments of a row, with
// thread 0 receiving the first fragment in its register r, and so on. A
// group of four threads loads an entire row of the matrix": row r is held by
// threads 4r..4r+3, thread t its elements 2 (t % 4) and 2 (t % 4) + 1 (in
// its .b32 register's low and high halves). "When .num = .x2, the elements
// of the second matrix are loaded in the next destination register ...".
constexpr int kFigure104RowThreads[8][4] = {{0, 1, 2, 3},     {4, 5, 6, 7},     {8, 9, 10, 11},
                                            {12, 13, 14, 15}, {16, 17, 18, 19}, {20, 21, 22, 23},
                                            {24, 25, 26, 27}, {28, 29, 30, 31}};
// "Optional qualifier .trans indicates that the matrix is loaded in
// column-major format": thread t receives element (t/4, 2(t%4) + half) of
// the matrix's transpose. Returns (row, column) of the matrix as stored (its
// rows the 16-byte rows the addresses name).
RC LdmatrixElement(bool trans, int thread, int half) {
  int row = -1, col = -1;
  for (int r = 0; r < 8; ++r) {
    for (int q = 0; q < 4; ++q) {
      if (kFigure104RowThreads[r][q] == thread) row = r, col = 2 * q + half;
    }
  }
  return trans ? RC{col, row} : RC{row, col};
}

// [desc]: "a 64-bit value ... with the following layout:
//   13–0  matrix-descriptor-encode(Matrix start address)
//   29–16 matrix-descriptor-encode(Leading dimension byte offset)
//   45–32 matrix-descriptor-encode(Stride dimension byte offset)
//   51–49 Matrix base offset ...
//   63–62 swizzling mode: 0 No swizzle, 1 128-Byte, 2 64-Byte, 3 32-Byte
// where matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4".
uint64_t Descriptor(uint64_t start, uint64_t lbo, uint64_t sbo, uint64_t base_offset,
                    uint64_t swizzle) {
  auto encode = [](uint64_t x) { return (x & 0x3FFFF) >> 4; };
  return encode(start) | encode(lbo) << 16 | encode(sbo) << 32 | (base_offset & 0x7) << 49 |
         (swizzle & 0x3) << 62;
}

}  // namespace isa

// CuTe layouts (CUTLASS's encoding of the same facts): a coordinate's index
// in a layout of flattened (shape, stride) modes, the first mode fastest.
namespace cute {

struct Mode {
  int64_t shape, stride;
};
int64_t Index(const std::vector<Mode>& modes, int64_t coord) {
  int64_t index = 0;
  for (const Mode& m : modes) {
    index += (coord % m.shape) * m.stride;
    coord /= m.shape;
  }
  return index;
}
// A (thread, value) -> index layout.
struct TV {
  std::vector<Mode> thread, value;
  int64_t operator()(int64_t t, int64_t v) const { return Index(thread, t) + Index(value, v); }
};

// mma_traits_sm80.hpp, SM80_16x8x16_F16F16F16F16_TN (and the F32 / BF16
// variants, which inherit it); indices column-major over (M, K), (N, K),
// (M, N):
//   ALayout = ((4,8),(2,2,2)) : ((32,1),(16,8,128))
//   BLayout = ((4,8),(2,2))   : ((16,1),(8,64))
//   CLayout = SM80_16x8_Row = ((4,8),(2,2)) : ((32,1),(16,8))
const TV kSm80A16{{{4, 32}, {8, 1}}, {{2, 16}, {2, 8}, {2, 128}}};
const TV kSm80B16{{{4, 16}, {8, 1}}, {{2, 8}, {2, 64}}};
const TV kSm80C{{{4, 32}, {8, 1}}, {{2, 16}, {2, 8}}};
// SM80_16x8x8_F32TF32TF32F32_TN:
//   ALayout = ((4,8),(2,2)) : ((16,1),(8,64))
//   BLayout = ((4,8),2)     : ((8,1),32)
const TV kSm80ATf32{{{4, 16}, {8, 1}}, {{2, 8}, {2, 64}}};
const TV kSm80BTf32{{{4, 8}, {8, 1}}, {{2, 32}}};
// copy_traits_sm75.hpp: the destination (thread, bit) -> bit layouts of
// ldmatrix, over the source's bits (the SrcLayout (32,128):(128,1): address
// thread s names 128 bits, row s % 8 of matrix s / 8):
//   SM75_U32x4_LDSM_N: (32,(32,4))          : (32,(1,1024))
//   SM75_U16x8_LDSM_T: ((4,8),(16,2,4))     : ((256,16),(1,128,1024))
const TV kLdsmN{{{32, 32}}, {{32, 1}, {4, 1024}}};
const TV kLdsmT{{{4, 256}, {8, 16}}, {{16, 1}, {2, 128}, {4, 1024}}};
// mma_traits_sm90_gmma.hpp:
//   CLayout_64xN = ((4,8,4),(2,2,N/8)) : ((128,1,16),(64,8,512))
TV Gmma64xN(int64_t n) { return {{{4, 128}, {8, 1}, {4, 16}}, {{2, 64}, {2, 8}, {n / 8, 512}}}; }

}  // namespace cute

// ===================================================================
// mma.sync fragments
// ===================================================================

// The transcriptions above agree with each other: the ISA's formulas and
// CuTe's layouts, entry by entry; a few entries worked out by hand from the
// formulas; and every element of each operand held by exactly one lane.
TEST(PtxIsaMma, TranscribedFragmentTablesAgreeWithCutlassAndCoverEachElementOnce) {
  struct Case {
    const char* name;
    isa::Fragment f;
    const cute::TV* tv;
    bool k_major_index;  // CuTe index: row + rows * col (A, C), or col + cols * row (B)
  };
  for (const Case& c : {Case{"A m16n8k16", isa::kA16, &cute::kSm80A16, false},
                        Case{"B m16n8k16", isa::kB16, &cute::kSm80B16, true},
                        Case{"C/D m16n8", isa::kC, &cute::kSm80C, false},
                        Case{"A m16n8k8 tf32", isa::kATf32, &cute::kSm80ATf32, false},
                        Case{"B m16n8k8 tf32", isa::kBTf32, &cute::kSm80BTf32, true}}) {
    std::map<RC, int> holders;
    for (int lane = 0; lane < 32; ++lane) {
      for (int i = 0; i < c.f.elements; ++i) {
        const RC rc = c.f.place(lane, i);
        ++holders[rc];
        const int64_t index = (*c.tv)(lane, i);
        const RC from_cute = c.k_major_index ? RC{int(index / c.f.cols), int(index % c.f.cols)}
                                             : RC{int(index % c.f.rows), int(index / c.f.rows)};
        EXPECT_EQ(rc, from_cute) << c.name << " lane " << lane << " element " << i;
      }
    }
    EXPECT_EQ(int(holders.size()), c.f.rows * c.f.cols) << c.name;
    for (const auto& [rc, n] : holders)
      EXPECT_EQ(n, 1) << c.name << " (" << rc.first << ", " << rc.second << ")";
  }
  // By hand from the formulas: lane 0 and lane 30 (groupID 7,
  // threadID_in_group 2).
  const std::vector<RC> a0 = {{0, 0}, {0, 1}, {8, 0}, {8, 1}, {0, 8}, {0, 9}, {8, 8}, {8, 9}};
  const std::vector<RC> a30 = {{7, 4},  {7, 5},  {15, 4},  {15, 5},
                               {7, 12}, {7, 13}, {15, 12}, {15, 13}};
  const std::vector<RC> b30 = {{4, 7}, {5, 7}, {12, 7}, {13, 7}};
  const std::vector<RC> c30 = {{7, 4}, {7, 5}, {15, 4}, {15, 5}};
  const std::vector<RC> a30_tf32 = {{7, 2}, {15, 2}, {7, 6}, {15, 6}};
  const std::vector<RC> b30_tf32 = {{2, 7}, {6, 7}};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(isa::M16n8k16A(0, i), a0[size_t(i)]) << i;
    EXPECT_EQ(isa::M16n8k16A(30, i), a30[size_t(i)]) << i;
  }
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(isa::M16n8k16B(30, i), b30[size_t(i)]) << i;
    EXPECT_EQ(isa::M16n8C(30, i), c30[size_t(i)]) << i;
    EXPECT_EQ(isa::M16n8k8Tf32A(30, i), a30_tf32[size_t(i)]) << i;
  }
  for (int i = 0; i < 2; ++i) EXPECT_EQ(isa::M16n8k8Tf32B(30, i), b30_tf32[size_t(i)]) << i;
}

// The interpreter's mma.sync fragments (what its products and fragment
// loads use) are the ISA's, lane by lane and element by element, in the
// ISA's element order (a0..a7, b0..b3).
TEST(PtxIsaMma, InterpreterFragmentsMatchTheIsa) {
  struct Case {
    const char* name;
    bool b, tf32;
    isa::Fragment f;
  };
  for (const Case& c :
       {Case{"A m16n8k16", false, false, isa::kA16}, Case{"B m16n8k16", true, false, isa::kB16},
        Case{"A m16n8k8 tf32", false, true, isa::kATf32},
        Case{"B m16n8k8 tf32", true, true, isa::kBTf32}}) {
    for (int lane = 0; lane < 32; ++lane) {
      const std::vector<RC> got = testing::MmaFragmentPlaces(c.b, c.tf32, lane);
      ASSERT_EQ(int(got.size()), c.f.elements) << c.name;
      for (int i = 0; i < c.f.elements; ++i)
        EXPECT_EQ(got[size_t(i)], c.f.place(lane, i))
            << c.name << " lane " << lane << " element " << i;
    }
  }
}

// The interpreter's accumulators (c0..c3 of mma.sync m16n8k16 and m16n8k8)
// are the ISA's.
TEST(PtxIsaMma, InterpreterAccumulatorsMatchTheIsa) {
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(testing::MmaAccumulatorPlace(lane, i), isa::M16n8C(lane, i))
          << "lane " << lane << " c" << i;
  }
}

// The compiler's fragment sizes (registers a lane allocates and the
// element counts its loads and codegen assume) are the ISA's.
TEST(PtxIsaMma, CompilerFragmentSizesMatchTheIsa) {
  EXPECT_EQ(ir::MmaFragmentElements(false, false), isa::kA16.elements);
  EXPECT_EQ(ir::MmaFragmentElements(true, false), isa::kB16.elements);
  EXPECT_EQ(ir::MmaFragmentElements(false, true), isa::kATf32.elements);
  EXPECT_EQ(ir::MmaFragmentElements(true, true), isa::kBTf32.elements);
}

// ===================================================================
// ldmatrix
// ===================================================================

// The interpreter's ldmatrix (which lane names which row, which elements a
// lane receives, with and without .trans) is the ISA's, for .x1, .x2 and
// .x4; the ISA transcription agrees with CuTe's LDSM layouts.
TEST(PtxIsaLdmatrix, InterpreterLaneLayoutMatchesTheIsa) {
  for (int num : {1, 2, 4}) {
    for (int j = 0; j < num; ++j) {
      for (int r = 0; r < 8; ++r) {
        EXPECT_EQ(testing::LdmatrixRowLane(j, r), isa::LdmatrixAddressThread(num, j, r))
            << ".x" << num << " matrix " << j << " row " << r;
      }
    }
  }
  for (bool trans : {false, true}) {
    for (int t = 0; t < 32; ++t) {
      for (int h = 0; h < 2; ++h) {
        EXPECT_EQ(testing::LdmatrixPlace(trans, t, h), isa::LdmatrixElement(trans, t, h))
            << (trans ? ".trans " : "") << "thread " << t << " half " << h;
      }
    }
  }
  // CuTe: thread t's register j, half h comes from source bit b; the
  // address thread for that bit's row is b / 128 (matrix b / 1024).
  for (bool trans : {false, true}) {
    const cute::TV& tv = trans ? cute::kLdsmT : cute::kLdsmN;
    for (int t = 0; t < 32; ++t) {
      for (int j = 0; j < 4; ++j) {
        for (int h = 0; h < 2; ++h) {
          const int64_t bit = tv(t, 16 * h + 32 * j);
          EXPECT_EQ(bit / 1024, j);
          const RC stored = {int((bit % 1024) / 128), int((bit % 128) / 16)};
          EXPECT_EQ(stored, isa::LdmatrixElement(trans, t, h))
              << (trans ? ".trans " : "") << "thread " << t << " register " << j << " half " << h;
          EXPECT_EQ(isa::LdmatrixAddressThread(4, j, stored.first), int(bit / 128));
        }
      }
    }
  }
}

// An integer evaluator for the lowered IR's index expressions.
std::optional<int64_t> EvalInt(const ir::Expr& e,
                               const std::unordered_map<const ir::ExprNode*, int64_t>& env) {
  const ir::ExprNode& n = *e.get();
  auto arg = [&](size_t i) { return EvalInt(n.args[i], env); };
  switch (n.kind) {
    case ir::ExprKind::kIntImm:
      return n.int_value;
    case ir::ExprKind::kVar: {
      auto it = env.find(e.get());
      if (it == env.end()) return std::nullopt;
      return it->second;
    }
    case ir::ExprKind::kBinary: {
      auto a = arg(0), b = arg(1);
      if (!a || !b) return std::nullopt;
      switch (n.op) {
        case ir::Op::kAdd:
          return *a + *b;
        case ir::Op::kSub:
          return *a - *b;
        case ir::Op::kMul:
          return *a * *b;
        case ir::Op::kFloorDiv:
          return ir::FloorDivInt(*a, *b);
        case ir::Op::kFloorMod:
          return ir::FloorModInt(*a, *b);
        case ir::Op::kMin:
          return std::min(*a, *b);
        case ir::Op::kMax:
          return std::max(*a, *b);
        default:
          return std::nullopt;
      }
    }
    case ir::ExprKind::kSelect: {
      auto c = arg(0);
      if (!c) return std::nullopt;
      return arg(*c ? 1 : 2);
    }
    default:
      return std::nullopt;
  }
}

// Runs `check` on each tensor-core statement `match` selects in a GPU
// program, once per value of the serial loops around it (block 0), with
// `thread` the thread index variable (checks bind it per thread).
class MmaWalker {
 public:
  using Env = std::unordered_map<const ir::ExprNode*, int64_t>;
  MmaWalker(std::function<bool(const ir::StmtNode&)> match,
            std::function<void(const ir::StmtNode&, Env&, const ir::ExprNode*, int64_t)> check)
      : match_(std::move(match)), check_(std::move(check)) {}

  void Walk(const ir::Stmt& s) {
    if (!Holds(s)) return;
    switch (s->kind) {
      case ir::StmtKind::kFor:
        if (ir::IsBlockBound(s->for_kind)) {
          env_[s->var.get()] = 0;
          Walk(s->body[0]);
        } else if (ir::IsThreadBound(s->for_kind)) {
          thread_ = s->var.get();
          threads_ = s->extent;
          Walk(s->body[0]);
        } else {
          for (int64_t i = 0; i < s->extent; ++i) {
            env_[s->var.get()] = i;
            Walk(s->body[0]);
          }
          env_.erase(s->var.get());
        }
        return;
      case ir::StmtKind::kMma:
        if (match_(*s)) check_(*s, env_, thread_, threads_);
        return;
      default:
        for (const ir::Stmt& b : s->body) Walk(b);  // guards are not evaluated
    }
  }

 private:
  bool Holds(const ir::Stmt& s) {
    auto it = holds_.find(s.get());
    if (it != holds_.end()) return it->second;
    bool h = s->kind == ir::StmtKind::kMma && match_(*s);
    for (const ir::Stmt& b : s->body) h = Holds(b) || h;
    return holds_[s.get()] = h;
  }

  std::function<bool(const ir::StmtNode&)> match_;
  std::function<void(const ir::StmtNode&, Env&, const ir::ExprNode*, int64_t)> check_;
  std::unordered_map<const ir::StmtNode*, bool> holds_;
  Env env_;
  const ir::ExprNode* thread_ = nullptr;
  int64_t threads_ = 0;
};

ir::ComputeDAG Dag(const std::string& spec) {
  auto w = ir::ParseWorkloadSpec(spec);
  EXPECT_TRUE(w.ok()) << spec << ": " << w.status();
  auto dag = ir::BuildComputeDAG(*w);
  EXPECT_TRUE(dag.ok()) << dag.status();
  return *dag;
}

ir::Target Cuda(const std::string& spec) {
  auto t = ir::Target::Parse(spec);
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

struct Lowered {
  ir::ComputeDAG dag;  // the scheduled DAG (shared tiles, fragments added)
  ir::Stmt program;
};

absl::StatusOr<Lowered> LowerTensorCore(const std::string& spec, const ir::Target& target,
                                        const schedule::TensorCoreTiling& tiling) {
  ir::ComputeDAG dag = Dag(spec);
  auto sched = schedule::TensorCoreSchedule(dag, target, tiling);
  if (!sched.ok()) return sched.status();
  auto st = schedule::ScheduleState::Replay(dag, *sched, target);
  if (!st.ok()) return st.status();
  return Lowered{st->dag(), schedule::Lower(*st)};
}

// What reading a lowered program's ldmatrix loads with the ISA's ldmatrix
// finds: each lane's row addresses taken as the ISA's address table takes
// them, each lane's registers filled per Figure 104 (.trans transposing),
// compared with the ISA's mma.m16n8k16 fragments of the operand the
// statement loads (A, or B's one or two fragments, the second from columns
// 8..; at its offset and strides, swizzled where the tile is).
struct LdmatrixReport {
  int statements = 0;
  int64_t checked = 0, mismatches = 0, misaligned = 0, wrong_num = 0;
  std::set<std::string> forms;  // "A .x4.trans", ...
  std::string first;            // the first problem, described
};

LdmatrixReport ReadLdmatrixLoads(const ir::Stmt& program) {
  LdmatrixReport rep;
  auto problem = [&](const std::string& what) {
    if (rep.first.empty()) rep.first = what;
  };
  MmaWalker walker(
      [](const ir::StmtNode& s) { return s.mma_ldmatrix; },
      [&](const ir::StmtNode& s, MmaWalker::Env& env, const ir::ExprNode* tx, int64_t threads) {
        ++rep.statements;
        const bool b = s.mma_load == 2;
        const isa::Fragment& f = b ? isa::kB16 : isa::kA16;
        // One 8x8 matrix per 32-bit fragment register ([ldmatrix]: "Each
        // component of the vector expression holds a fragment from the
        // corresponding matrix").
        const int num = int(ir::LdmatrixMatrices(s)), fragments = int(s.mma_fragments);
        if (num != f.registers * fragments) {
          ++rep.wrong_num;
          problem(absl::StrCat(b ? "B" : "A", ": .x", num, " for ", fragments, " fragments"));
        }
        if (num != 1 && num != 2 && num != 4) return;
        const bool trans = ir::LdmatrixTransposed(s);
        rep.forms.insert(absl::StrCat(b ? "B" : "A", " .x", num, trans ? ".trans" : ""));
        for (int64_t w = 0; w < threads / 32; ++w) {
          std::vector<int64_t> row(32), offset(32);
          for (int l = 0; l < 32; ++l) {
            env[tx] = 32 * w + l;
            auto r = EvalInt(s.mma_row, env);
            auto o = EvalInt(s.mma_offsets[0], env);
            if (!r || !o) {
              ++rep.mismatches;
              return problem("an ldmatrix row or offset this test cannot evaluate: " +
                             ir::ToString(s.mma_row));
            }
            row[size_t(l)] = *r, offset[size_t(l)] = *o;
            if (offset[size_t(l)] != offset[0]) {
              ++rep.mismatches;
              problem("a warp's offsets differ");
            }
          }
          for (int l = 0; l < 32; ++l) {
            for (int j = 0; j < num; ++j) {
              for (int h = 0; h < 2; ++h) {
                ++rep.checked;
                // What the ISA's ldmatrix puts in lane l's register j, half h.
                const auto [mr, mc] = isa::LdmatrixElement(trans, l, h);
                const int addr_lane = isa::LdmatrixAddressThread(num, j, mr);
                if (row[size_t(addr_lane)] % 8 != 0) {
                  ++rep.misaligned;
                  problem(absl::StrCat("lane ", addr_lane, "'s row address ",
                                       row[size_t(addr_lane)], " is not 16-byte aligned"));
                }
                const int64_t got = row[size_t(addr_lane)] + mc;
                // What the mma fragment wants there: element 2 (j % regs) + h
                // of fragment j / regs.
                const int q = j / f.registers, e = 2 * (j % f.registers) + h;
                const auto [r, c] = f.place(l, e);
                const int64_t u =
                    offset[0] + r * s.mma_a_strides[0] + (c + 8 * q) * s.mma_a_strides[1];
                const int64_t want = s.mma_swizzle ? ir::SwizzledElement(u, s.mma_swizzle) : u;
                if (got != want) {
                  ++rep.mismatches;
                  problem(absl::StrCat(b ? "B" : "A", " .x", num, trans ? ".trans" : "", " warp ",
                                       w, " lane ", l, " register ", j, " half ", h, ": element ",
                                       got, ", the fragment wants ", want));
                }
              }
            }
          }
        }
      });
  walker.Walk(program);
  return rep;
}

// The ldmatrix test's schedules (sm_80): A K- or M-major, B N- or K-major,
// B's fragments in pairs (.x4) or alone (.x2), plain and swizzled tiles.
struct LdmatrixCase {
  std::string spec;
  bool swizzle;
  int64_t frags_n;
};
const std::vector<LdmatrixCase>& LdmatrixCases() {
  static const std::vector<LdmatrixCase> cases = {
      {"matmul(M=64,N=64,K=64,dtype=float16)", false, 4},
      {"matmul(M=64,N=64,K=64,transpose_a=1,transpose_b=1,dtype=float16)", false, 4},
      {"matmul(M=64,N=48,K=64,dtype=bfloat16)", false, 3},
      {"matmul(M=64,N=48,K=64,transpose_b=1,dtype=float16)", false, 3},
      {"matmul(M=64,N=64,K=64,dtype=float16)", true, 4},
      {"matmul(M=64,N=64,K=64,transpose_a=1,transpose_b=1,dtype=float16)", true, 4}};
  return cases;
}

absl::StatusOr<Lowered> LowerLdmatrixCase(const LdmatrixCase& c) {
  const ir::Target target = Cuda("cuda -arch=sm_80 -max-shared-memory-per-block=166912");
  schedule::TensorCoreTiling t = schedule::DefaultTensorCoreTiling(Dag(c.spec), target);
  t.ldmatrix = 1;
  t.frags_n = c.frags_n;
  if (c.swizzle) t.pad = 0, t.swizzle = 1;
  return LowerTensorCore(c.spec, target, t);
}

// The compiler's ldmatrix loads in lowered programs, read with the ISA's
// ldmatrix, deliver exactly the ISA's mma.m16n8k16 fragments of the operand
// they load: A by .x4, B by .x2 (one fragment) or .x4 (two), untransposed
// where the tile keeps K contiguous, transposed where it keeps M (N)
// contiguous; swizzled tiles too; every row address 16-byte aligned ("The
// matrix addresses must be naturally aligned accordingly").
TEST(PtxIsaLdmatrix, CompilerLaneRowsDeliverTheIsaFragments) {
  std::set<std::string> forms;
  int64_t checked = 0;
  for (const LdmatrixCase& c : LdmatrixCases()) {
    const std::string what = absl::StrCat(c.spec, c.swizzle ? " swizzled" : "");
    auto lowered = LowerLdmatrixCase(c);
    ASSERT_TRUE(lowered.ok()) << what << ": " << lowered.status();
    const LdmatrixReport rep = ReadLdmatrixLoads(lowered->program);
    EXPECT_GT(rep.statements, 0) << what;
    EXPECT_EQ(rep.mismatches, 0) << what << ": " << rep.first;
    EXPECT_EQ(rep.misaligned, 0) << what << ": " << rep.first;
    EXPECT_EQ(rep.wrong_num, 0) << what << ": " << rep.first;
    forms.insert(rep.forms.begin(), rep.forms.end());
    checked += rep.checked;
  }
  // Every form the compiler emits was seen.
  for (const char* form : {"A .x4", "A .x4.trans", "B .x2", "B .x2.trans", "B .x4", "B .x4.trans"})
    EXPECT_TRUE(forms.count(form)) << form;
  EXPECT_GT(checked, 10000);
}

// The swizzle the compiler stores and reads tiles with keeps each 16-byte
// chunk whole and in its row, a permutation of the row's chunks, so each
// ldmatrix row address names 8 contiguous, 16-byte aligned elements of the
// same row ([ldmatrix]: "a group of four consecutive threads loads 16
// bytes. The matrix addresses must be naturally aligned accordingly"); the
// expression form (SwizzledColumn, what the lowering emits) is the same
// function.
TEST(PtxIsaLdmatrix, SwizzleKeepsLdmatrixRowsWholeAndAligned) {
  ir::Expr r = ir::Var("r"), c = ir::Var("c");
  for (int64_t row : {8, 16, 32, 64, 128, 256}) {
    const ir::Expr column = ir::SwizzledColumn(r, c, row);
    for (int64_t ri = 0; ri < 24; ++ri) {
      std::set<int64_t> chunks;
      for (int64_t ci = 0; ci < row; ++ci) {
        const int64_t u = ri * row + ci, s = ir::SwizzledElement(u, row);
        EXPECT_EQ(s / row, ri) << "row " << row << " element " << u << " leaves its row";
        EXPECT_EQ(s % 8, u % 8) << "row " << row << " element " << u << " leaves its chunk";
        if (ci % 8 == 0) chunks.insert((s % row) / 8);
        auto e = EvalInt(column, {{r.get(), ri}, {c.get(), ci}});
        ASSERT_TRUE(e.has_value());
        EXPECT_EQ(ri * row + *e, s) << "row " << row << " (" << ri << ", " << ci << ")";
      }
      EXPECT_EQ(int64_t(chunks.size()), row / 8) << "row " << row << ": chunks collide";
    }
  }
}

// ===================================================================
// wgmma
// ===================================================================

// The interpreter's wgmma accumulators: thread t's register d_q of
// m64nNk16 is where CuTe's CLayout_64xN puts it, for every N the ISA
// allows ("N = 8*i where i = {1, 2, ... , 32}"). Figure 149 [wgmma-d] is an
// image; it shows each warp w owning rows 16w..16w+15, laid out in each
// 8-column block as mma.m16n8's C fragment ([mma16816], Figure 83) with
// d_{4b..4b+3} in block b — checked too, with entries worked by hand.
TEST(PtxIsaWgmma, InterpreterAccumulatorLayoutMatchesTheDocuments) {
  for (int64_t n = 8; n <= 256; n += 8) {
    const cute::TV tv = cute::Gmma64xN(n);
    std::set<std::pair<int64_t, int64_t>> seen;
    for (int t = 0; t < 128; ++t) {
      for (int64_t q = 0; q < n / 2; ++q) {
        const auto got = testing::WgmmaAccumulatorPlace(t, q);
        const int64_t index = tv(t, q);
        EXPECT_EQ(got, std::make_pair(index % 64, index / 64))
            << "N " << n << " thread " << t << " d" << q;
        const RC c = isa::M16n8C(t % 32, int(q % 4));
        EXPECT_EQ(got, std::make_pair(int64_t(16 * (t / 32) + c.first), 8 * (q / 4) + c.second))
            << "N " << n << " thread " << t << " d" << q;
        seen.insert(got);
      }
    }
    EXPECT_EQ(int64_t(seen.size()), 64 * n) << "N " << n;
  }
  // Thread 0: d0 (0, 0), d1 (0, 1), d2 (8, 0), d3 (8, 1), d4 (0, 8);
  // thread 127 (warp 3, lane 31): d0 (55, 6), d3 (63, 7), d5 (55, 15).
  using P = std::pair<int64_t, int64_t>;
  EXPECT_EQ(testing::WgmmaAccumulatorPlace(0, 0), P(0, 0));
  EXPECT_EQ(testing::WgmmaAccumulatorPlace(0, 1), P(0, 1));
  EXPECT_EQ(testing::WgmmaAccumulatorPlace(0, 2), P(8, 0));
  EXPECT_EQ(testing::WgmmaAccumulatorPlace(0, 3), P(8, 1));
  EXPECT_EQ(testing::WgmmaAccumulatorPlace(0, 4), P(0, 8));
  EXPECT_EQ(testing::WgmmaAccumulatorPlace(127, 0), P(55, 6));
  EXPECT_EQ(testing::WgmmaAccumulatorPlace(127, 3), P(63, 7));
  EXPECT_EQ(testing::WgmmaAccumulatorPlace(127, 5), P(55, 15));
}

// The interpreter reads wgmma's factors through the ISA's no-swizzle
// canonical layouts [wgmma-smem], "Canonical Layouts" table, T = 128 /
// 16 = 8 elements per 16 bytes:
//   MN-major, no swizzle: ((T,1,m),(8,k)) : ((1,T,SBO),(1T,LBO))
//   K-major,  no swizzle: ((8,m),(T,2k))  : ((1T,SBO),(1,LBO))
// (rows along M or N, columns along K; CUTLASS's make_gmma_desc puts the
// same SBO and LBO in the descriptor). And the ISA's worked example
// "MN-Major, no-swizzling and bf16 type": exact layout
// ((8,1,2),(8,2)):((1,8,64),(8,128)), LBO 128 * sizeof(bf16), SBO 64 *
// sizeof(bf16), encoded 16 and 8.
TEST(PtxIsaWgmma, InterpreterCanonicalLayoutsMatchTheIsa) {
  const int64_t T = 8;
  for (const std::array<int64_t, 2>& lbo_sbo :
       std::vector<std::array<int64_t, 2>>{{64, 256}, {128, 64}, {512, 64}, {72, 1032}, {8, 16}}) {
    const int64_t lbo = lbo_sbo[0], sbo = lbo_sbo[1];
    const std::vector<cute::Mode> mn_rows = {{T, 1}, {1, T}, {64, sbo}},
                                  mn_cols = {{8, T}, {64, lbo}};
    const std::vector<cute::Mode> k_rows = {{8, T}, {64, sbo}}, k_cols = {{T, 1}, {64, lbo}};
    for (int64_t i = 0; i < 256; ++i) {
      for (int64_t k = 0; k < 16; ++k) {
        EXPECT_EQ(testing::WgmmaCanonicalOffset(i, k, true, lbo_sbo),
                  cute::Index(mn_rows, i) + cute::Index(mn_cols, k))
            << "MN-major lbo " << lbo << " sbo " << sbo << " (" << i << ", " << k << ")";
        EXPECT_EQ(testing::WgmmaCanonicalOffset(i, k, false, lbo_sbo),
                  cute::Index(k_rows, i) + cute::Index(k_cols, k))
            << "K-major lbo " << lbo << " sbo " << sbo << " (" << i << ", " << k << ")";
      }
    }
  }
  const std::vector<cute::Mode> rows = {{8, 1}, {1, 8}, {2, 64}}, cols = {{8, 8}, {2, 128}};
  for (int64_t i = 0; i < 16; ++i) {
    for (int64_t k = 0; k < 16; ++k) {
      EXPECT_EQ(testing::WgmmaCanonicalOffset(i, k, true, {128, 64}),
                cute::Index(rows, i) + cute::Index(cols, k))
          << "(" << i << ", " << k << ")";
    }
  }
  const uint64_t d = isa::Descriptor(0, 128 * 2, 64 * 2, 0, 0);
  EXPECT_EQ((d >> 16) & 0x3FFF, 16u);
  EXPECT_EQ((d >> 32) & 0x3FFF, 8u);
}

// The compiler's wgmma products, in lowered programs of all four
// majorness pairs: starts and strides whole 16-byte units (the descriptor
// drops the low 4 bits; [wgmma-smem]: "their starting addresses must be
// aligned to 16 bytes"), offsets that fit the 14-bit fields, N a shape the
// ISA lists; and the CUDA emitted for them passes tf_wgmma_desc the byte
// offsets {LBO, SBO} (16-bit elements: twice the element strides), in that
// order, to the function of the statement's shape and majorness.
TEST(PtxIsaWgmma, CompilerDescriptorsAreWholeSixteenByteUnitsAsEmitted) {
  const ir::Target target = Cuda("cuda -arch=sm_90 -max-shared-memory-per-block=232448");
  schedule::TensorCoreTiling t;
  t.warps_m = 4, t.warps_n = 1, t.frags_m = 2, t.frags_n = 8, t.k_steps = 2, t.pad = 0;
  t.stages = 2, t.ldmatrix = 0, t.async_copy = 1, t.wgmma = 1;
  std::set<std::pair<bool, bool>> majorness;
  for (const std::string spec :
       {"matmul(M=128,N=64,K=64,dtype=float16)",
        "matmul(M=128,N=64,K=64,transpose_a=1,dtype=float16)",
        "matmul(M=128,N=64,K=64,transpose_b=1,dtype=bfloat16)",
        "matmul(M=128,N=64,K=64,transpose_a=1,transpose_b=1,dtype=float16)"}) {
    auto lowered = LowerTensorCore(spec, target, t);
    ASSERT_TRUE(lowered.ok()) << spec << ": " << lowered.status();
    std::multiset<std::pair<int64_t, int64_t>> expected_bytes;
    std::set<std::string> names;
    int products = 0;
    MmaWalker walker(
        [](const ir::StmtNode& s) { return s.mma_wgmma; },
        [&](const ir::StmtNode& s, MmaWalker::Env& env, const ir::ExprNode* tx, int64_t threads) {
          ++products;
          EXPECT_TRUE(s.mma_n >= 8 && s.mma_n <= 256 && s.mma_n % 8 == 0) << s.mma_n;
          majorness.insert({s.mma_a_mn_major, s.mma_b_mn_major});
          names.insert(codegen::WgmmaName(s.mma_n, s.mma_a_mn_major, s.mma_b_mn_major));
          for (const std::array<int64_t, 2>& st : {s.mma_a_strides, s.mma_b_strides}) {
            for (int64_t v : st) {
              EXPECT_EQ(v % 8, 0) << spec << ": stride " << v;
              EXPECT_LT(2 * v, int64_t(1) << 18) << spec << ": stride " << v;
            }
          }
          expected_bytes.insert({2 * s.mma_a_strides[0], 2 * s.mma_a_strides[1]});
          expected_bytes.insert({2 * s.mma_b_strides[0], 2 * s.mma_b_strides[1]});
          for (int64_t th = 0; th < threads; th += 32) {
            env[tx] = th;
            for (const ir::Expr& e : s.mma_offsets) {
              auto v = EvalInt(e, env);
              ASSERT_TRUE(v.has_value()) << ir::ToString(e);
              EXPECT_EQ(*v % 8, 0) << spec << ": start " << *v;
            }
          }
        });
    walker.Walk(lowered->program);
    ASSERT_GT(products, 0) << spec;
    auto program = codegen::EmitCuda(lowered->dag, lowered->program, target);
    ASSERT_TRUE(program.ok()) << program.status();
    // Each call: tf_wgmma_desc(<pointer expression>, <lbo>u, <sbo>u).
    const std::regex args(R"(, (\d+)u, (\d+)u\)$)");
    std::set<std::pair<int64_t, int64_t>> emitted;
    int calls = 0;
    const std::string& src = program->source;
    for (size_t at = src.find("tf_wgmma_desc("); at != std::string::npos;
         at = src.find("tf_wgmma_desc(", at + 1)) {
      const size_t end = src.find("u)", at);
      if (end == std::string::npos) break;
      const std::string call = src.substr(at, end + 2 - at);
      std::smatch m;
      if (absl::StartsWith(call, "tf_wgmma_desc(const")) continue;  // the definition
      ASSERT_TRUE(std::regex_search(call, m, args)) << call;
      emitted.insert({std::stoll(m[1]), std::stoll(m[2])});
      ++calls;
    }
    EXPECT_GT(calls, 0) << spec;
    const std::set<std::pair<int64_t, int64_t>> expected(expected_bytes.begin(),
                                                         expected_bytes.end());
    EXPECT_EQ(emitted, expected) << spec;
    for (const std::string& name : names)
      EXPECT_TRUE(absl::StrContains(program->source, name + "(&")) << spec << ": " << name;
  }
  EXPECT_EQ(majorness.size(), 4u);
}

// ===================================================================
// The CUDA prelude's helpers, compiled as host C++
// ===================================================================

// Past the closing brace of the function whose header starts at `at`
// (npos if none).
size_t BodyEnd(const std::string& source, size_t at) {
  int depth = 0;
  for (size_t i = source.find('{', at); i < source.size(); ++i) {
    if (source[i] == '"') {  // a string literal (an asm template)
      for (++i; i < source.size() && source[i] != '"'; ++i) i += source[i] == '\\';
      continue;
    }
    if (source[i] == '{') ++depth;
    if (source[i] == '}' && --depth == 0) return i + 1;
  }
  return std::string::npos;
}

// The text of device function `name` in `source` (header to closing brace).
std::string DeviceFunction(const std::string& source, const std::string& name) {
  const std::regex header("__device__ __forceinline__ [A-Za-z_ ]+[ *]" + name + "\\(");
  std::smatch m;
  if (!std::regex_search(source, m, header)) return "";
  const size_t at = size_t(m.position(0)), end = BodyEnd(source, at);
  return end == std::string::npos ? "" : source.substr(at, end - at) + "\n";
}

// A C++ compiler to build host programs with (the one this build used is
// the usual /usr/bin/c++).
std::string HostCompiler() {
  std::vector<std::string> candidates;
  if (const char* cxx = std::getenv("CXX"); cxx && cxx[0] == '/') candidates.push_back(cxx);
  for (const char* c : {"/usr/bin/c++", "/usr/bin/g++", "/usr/bin/clang++", "/usr/local/bin/c++"})
    candidates.push_back(c);
  for (const std::string& c : candidates) {
    if (access(c.c_str(), X_OK) == 0) return c;
  }
  return "";
}

// The prelude's pure helpers (the mma.sync fragment gathers and their
// packing, the wgmma descriptor, floor division), compiled for the host
// with __device__ dropped, threadIdx a variable and the shared-address and
// TF32-rounding asm stubbed; lane by lane they gather the ISA's fragments
// (.f16x2 registers holding the lower-numbered element in the low half:
// "Elements (low to high)"), in both storage orders, from any warp; the
// descriptor is the ISA's bit layout (no swizzle, base offset 0), the
// worked example's encodings included.
// CheckPreludeHelpers checks that with the given prelude texts (the test
// below with the real ones, PtxIsaSelfCheck with broken ones).
void CheckPreludeHelpers(const std::string& base, const std::string& mma, const std::string& tf32,
                         const std::string& wgmma) {
  const std::string cxx = HostCompiler();
  ASSERT_FALSE(cxx.empty()) << "no host C++ compiler (c++, g++ or clang++ in /usr/bin)";
  std::string functions = base;  // tf_idx, tf_floordiv, tf_floormod
  for (const auto& [text, name] : std::vector<std::pair<const std::string*, const char*>>{
           {&mma, "tf_pack_h2"},
           {&mma, "tf_mma_m16n8k16_frag_a"},
           {&mma, "tf_mma_m16n8k16_frag_b"},
           {&tf32, "tf_mma_m16n8k8_tf32_frag_a"},
           {&tf32, "tf_mma_m16n8k8_tf32_frag_b"},
           {&wgmma, "tf_wgmma_desc"}}) {
    const std::string f = DeviceFunction(*text, name);
    ASSERT_FALSE(f.empty()) << name << " is not in the prelude";
    functions += f;
  }
  const std::vector<std::array<unsigned, 3>> descriptors = {
      {0, 256, 128},  // the ISA's MN-major bf16 example: LBO 256 B -> 16, SBO 128 B -> 8
      {0x400, 128, 1024},
      {0x3FFF0, 0x3FFF0, 0x10},
      {0x12340, 0x2A0, 0x1F0},
      {0x47FF0, 0x40010, 16}};
  std::string desc_calls;
  for (const auto& d : descriptors)
    absl::StrAppend(&desc_calls, "  tf_stub_address = ", d[0], "u; std::printf(\"DESC ", d[0], " ",
                    d[1], " ", d[2], " %llu\\n\", tf_wgmma_desc(nullptr, ", d[1], "u, ", d[2],
                    "u));\n");
  const std::string source = absl::StrCat(R"(#include <cstdio>
#define __device__
#define __forceinline__ inline
#define TF_INDEX_T long long
struct TfDim3 { unsigned x = 0, y = 0, z = 0; };
static TfDim3 threadIdx;
static unsigned tf_stub_address;
static unsigned tf_shared_address(const void*) { return tf_stub_address; }
static unsigned tf_tf32(float f) { return unsigned(f); }
)",
                                          functions, R"(
int main() {
  for (int order = 0; order < 2; ++order) {
    // Element (r, c) holds 16 r + c, stored row- (order 0) or column-major.
    unsigned short a[256], b[256];
    float af[256], bf[256];
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 16; ++c) a[order ? r + 16 * c : 16 * r + c] = (unsigned short)(16 * r + c);
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 8; ++c) b[order ? r + 16 * c : 8 * r + c] = (unsigned short)(16 * r + c);
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 8; ++c) af[order ? r + 16 * c : 8 * r + c] = float(16 * r + c);
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 8; ++c) bf[order ? r + 8 * c : 8 * r + c] = float(16 * r + c);
    for (int lane = 0; lane < 32; ++lane) {
      threadIdx.x = 96 + lane;  // warp 3
      unsigned ra[4], rb[2], rta[4], rtb[2];
      tf_mma_m16n8k16_frag_a(ra, a, order ? 1 : 16, order ? 16 : 1);
      tf_mma_m16n8k16_frag_b(rb, b, order ? 1 : 8, order ? 16 : 1);
      tf_mma_m16n8k8_tf32_frag_a(rta, af, order ? 1 : 8, order ? 16 : 1);
      tf_mma_m16n8k8_tf32_frag_b(rtb, bf, order ? 1 : 8, order ? 8 : 1);
      std::printf("A16 %d %d %u %u %u %u\n", order, lane, ra[0], ra[1], ra[2], ra[3]);
      std::printf("B16 %d %d %u %u\n", order, lane, rb[0], rb[1]);
      std::printf("ATF32 %d %d %u %u %u %u\n", order, lane, rta[0], rta[1], rta[2], rta[3]);
      std::printf("BTF32 %d %d %u %u\n", order, lane, rtb[0], rtb[1]);
    }
  }
)",
                                          desc_calls, R"(
  for (int x = -9; x <= 9; ++x)
    for (int y = -4; y <= 5; ++y)
      if (y != 0 && y != -2 && y != 3 && y != 4) std::printf("DIV %d %d %lld %lld\n", x, y, tf_floordiv(x, y), tf_floormod(x, y));
  return 0;
}
)");
  testing::TempDir dir;
  testing::WriteFile(dir.File("prelude_host.cc"), source);
  testing::CommandResult built = testing::RunCommand(
      {cxx, "-std=c++17", "-O1", "-w", "-o", dir.File("prelude_host"), dir.File("prelude_host.cc")},
      dir.path());
  ASSERT_EQ(built.exit_code, 0) << built.err << "\n" << source;
  testing::CommandResult ran = testing::RunCommand({dir.File("prelude_host")}, dir.path());
  ASSERT_EQ(ran.exit_code, 0) << ran.err;

  int fragments = 0, descs = 0, divs = 0;
  for (absl::string_view line : absl::StrSplit(ran.out, '\n', absl::SkipEmpty())) {
    std::vector<std::string> w = absl::StrSplit(line, ' ');
    std::vector<uint64_t> v;
    for (size_t i = 1; i < w.size(); ++i) {
      int64_t x = 0;
      ASSERT_TRUE(absl::SimpleAtoi(w[i], &x)) << line;
      v.push_back(uint64_t(x));
    }
    auto check16 = [&](const isa::Fragment& f, const char* what) {
      const int lane = int(v[1]);
      ASSERT_EQ(int(v.size()) - 2, f.registers) << line;
      for (int e = 0; e < f.elements; ++e) {
        const uint64_t value = (v[2 + size_t(e / 2)] >> (16 * (e % 2))) & 0xFFFF;
        EXPECT_EQ(RC(int(value / 16), int(value % 16)), f.place(lane, e))
            << what << " order " << v[0] << " lane " << lane << " element " << e;
      }
      ++fragments;
    };
    auto check32 = [&](const isa::Fragment& f, const char* what) {
      const int lane = int(v[1]);
      ASSERT_EQ(int(v.size()) - 2, f.elements) << line;
      for (int e = 0; e < f.elements; ++e) {
        EXPECT_EQ(RC(int(v[2 + size_t(e)] / 16), int(v[2 + size_t(e)] % 16)), f.place(lane, e))
            << what << " order " << v[0] << " lane " << lane << " element " << e;
      }
      ++fragments;
    };
    if (w[0] == "A16") check16(isa::kA16, "tf_mma_m16n8k16_frag_a");
    if (w[0] == "B16") check16(isa::kB16, "tf_mma_m16n8k16_frag_b");
    if (w[0] == "ATF32") check32(isa::kATf32, "tf_mma_m16n8k8_tf32_frag_a");
    if (w[0] == "BTF32") check32(isa::kBTf32, "tf_mma_m16n8k8_tf32_frag_b");
    if (w[0] == "DESC") {
      EXPECT_EQ(v[3], isa::Descriptor(v[0], v[1], v[2], 0, 0))
          << "tf_wgmma_desc(start " << v[0] << ", lbo " << v[1] << ", sbo " << v[2] << ")";
      if (v[1] == 256 && v[2] == 128) {
        EXPECT_EQ((v[3] >> 16) & 0x3FFF, 16u);
        EXPECT_EQ((v[3] >> 32) & 0x3FFF, 8u);
      }
      EXPECT_EQ(v[3] >> 62, 0u) << "swizzle mode: none";
      EXPECT_EQ((v[3] >> 49) & 7, 0u) << "base offset";
      ++descs;
    }
    if (w[0] == "DIV") {
      const int64_t x = int64_t(v[0]), y = int64_t(v[1]);
      const int64_t q = int64_t(std::floor(double(x) / double(y)));
      EXPECT_EQ(int64_t(v[2]), q) << x << " floordiv " << y;
      EXPECT_EQ(int64_t(v[3]), x - q * y) << x << " floormod " << y;
      ++divs;
    }
  }
  EXPECT_EQ(fragments, 2 * 32 * 4);
  EXPECT_EQ(descs, int(descriptors.size()));
  EXPECT_EQ(divs, 19 * 6);
}

TEST(PtxIsaPrelude, HelpersCompiledOnTheHostMatchTheIsa) {
  CheckPreludeHelpers(codegen::kCudaPrelude, codegen::kCudaMmaPrelude, codegen::kCudaMmaTf32Prelude,
                      codegen::kCudaWgmmaPrelude);
}

// ===================================================================
// Inline asm against the ISA's operand lists
// ===================================================================

struct AsmOperand {
  std::string constraint, expr;
};
struct AsmStatement {
  std::string function;              // the device function it is in ("" at a kernel's level)
  std::string ptx;                   // the template, C escapes undone
  std::vector<AsmOperand> operands;  // outputs, then inputs (GCC's %N numbering)
  size_t outputs = 0;
};

// The asm statements of C source `c`.
std::vector<AsmStatement> FindAsm(const std::string& c) {
  std::vector<AsmStatement> out;
  auto skip_string = [&](size_t i) {  // i at the opening quote; returns past the closing one
    for (++i; i < c.size() && c[i] != '"'; ++i) i += c[i] == '\\';
    return i + 1;
  };
  // The device functions: where each starts and ends.
  struct Function {
    size_t begin, end;
    std::string name;
  };
  std::vector<Function> functions;
  const std::regex header(R"(__device__ __forceinline__ [A-Za-z_ ]+[ *]([A-Za-z_0-9]+)\()");
  for (auto it = std::sregex_iterator(c.begin(), c.end(), header); it != std::sregex_iterator();
       ++it)
    functions.push_back({size_t(it->position(0)), BodyEnd(c, size_t(it->position(0))), (*it)[1]});
  for (size_t i = 0; i < c.size();) {
    if (c.compare(i, 2, "//") == 0) {
      i = c.find('\n', i);
      if (i == std::string::npos) break;
      continue;
    }
    if (c[i] == '"') {
      i = skip_string(i);
      continue;
    }
    auto word = [&](size_t k) { return k < c.size() && (std::isalnum(c[k]) || c[k] == '_'); };
    if (c.compare(i, 3, "asm") != 0 || (i > 0 && word(i - 1)) || word(i + 3)) {
      ++i;
      continue;
    }
    AsmStatement a;
    for (const Function& f : functions) {
      if (f.begin < i && i < f.end) a.function = f.name;
    }
    size_t j = c.find('(', i);
    // Sections split at ':' outside strings and nested brackets.
    std::vector<std::string> sections(1);
    int depth = 0;
    for (++j; j < c.size(); ++j) {
      if (c[j] == '"') {
        const size_t end = skip_string(j);
        sections.back() += c.substr(j, end - j);
        j = end - 1;
        continue;
      }
      if (c[j] == '(' || c[j] == '[') ++depth;
      if (c[j] == ')' || c[j] == ']') {
        if (depth == 0) break;
        --depth;
      }
      if (c[j] == ':' && depth == 0) {
        sections.emplace_back();
        continue;
      }
      sections.back() += c[j];
    }
    i = j + 1;
    // The template: its string literals, unescaped.
    for (size_t k = 0; k < sections[0].size(); ++k) {
      if (sections[0][k] != '"') continue;
      for (++k; k < sections[0].size() && sections[0][k] != '"'; ++k) {
        if (sections[0][k] == '\\') {
          const char e = sections[0][++k];
          a.ptx += e == 'n' ? '\n' : e == 't' ? '\t' : e;
        } else {
          a.ptx += sections[0][k];
        }
      }
    }
    for (size_t s = 1; s < 3 && s < sections.size(); ++s) {
      // "c"(expr), "c"(expr), ... split at top-level commas.
      std::vector<std::string> items(1);
      int d = 0;
      for (size_t k = 0; k < sections[s].size(); ++k) {
        const char ch = sections[s][k];
        if (ch == '"') {
          const size_t end = sections[s].find('"', k + 1);
          items.back() += sections[s].substr(k, end + 1 - k);
          k = end;
          continue;
        }
        if (ch == '(' || ch == '[') ++d;
        if (ch == ')' || ch == ']') --d;
        if (ch == ',' && d == 0) {
          items.emplace_back();
          continue;
        }
        items.back() += ch;
      }
      for (const std::string& item : items) {
        const absl::string_view v = absl::StripAsciiWhitespace(item);
        if (v.empty()) continue;
        const size_t q = v.find('"', 1), open = v.find('(', q), close = v.rfind(')');
        AsmOperand op{
            std::string(v.substr(1, q - 1)),
            std::string(absl::StripAsciiWhitespace(v.substr(open + 1, close - open - 1)))};
        a.operands.push_back(op);
        if (s == 1) ++a.outputs;
      }
    }
    out.push_back(std::move(a));
  }
  return out;
}

// One PTX instruction of a template: opcode and operands (a vector operand
// "{...}" split into its registers, an address "[...]" kept bracketed).
struct Instruction {
  std::string opcode;
  std::vector<std::vector<std::string>> operands;
};

std::vector<Instruction> ParsePtx(const std::string& ptx, std::set<std::string>* predicates) {
  std::vector<Instruction> out;
  for (absl::string_view piece : absl::StrSplit(ptx, ';')) {
    std::string s(absl::StripAsciiWhitespace(piece));
    while (!s.empty() && (s[0] == '{' || s[0] == '}'))
      s = std::string(absl::StripAsciiWhitespace(s.substr(1)));
    if (s.empty()) continue;
    if (absl::StartsWith(s, ".reg .pred ")) {
      predicates->insert(std::string(absl::StripAsciiWhitespace(s.substr(11))));
      continue;
    }
    if (absl::StartsWith(s, ".reg")) continue;
    Instruction ins;
    const size_t sp = s.find_first_of(" \t\n");
    ins.opcode = s.substr(0, sp);
    if (sp != std::string::npos) {
      int depth = 0;
      std::string cur;
      auto flush = [&] {
        std::string t(absl::StripAsciiWhitespace(cur));
        cur.clear();
        if (t.empty()) return;
        std::vector<std::string> regs;
        if (t[0] == '{') {
          for (absl::string_view r : absl::StrSplit(t.substr(1, t.size() - 2), ','))
            regs.emplace_back(absl::StripAsciiWhitespace(r));
        } else {
          regs.push_back(t);
        }
        ins.operands.push_back(regs);
      };
      for (char ch : s.substr(sp)) {
        if (ch == '{' || ch == '[') ++depth;
        if (ch == '}' || ch == ']') --depth;
        if (ch == ',' && depth == 0) {
          flush();
          continue;
        }
        cur += ch;
      }
      flush();
    }
    out.push_back(ins);
  }
  return out;
}

// Opcodes and operand expressions the asm check recognizes.
const std::regex kElement(R"(([A-Za-z_]\w*)\[(\d+)\])");
const std::regex kMma(
    R"(mma\.sync\.aligned\.(m16n8k16|m16n8k8)\.row\.col\.f32\.(\w+)\.(\w+)\.f32)");
const std::regex kLdmatrix(R"(ldmatrix\.sync\.aligned\.m8n8\.x([124])(\.trans)?\.shared\.b16)");
const std::regex kWgmma(R"(wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16\.f32\.(\w+)\.(\w+))");
const std::regex kSrcSize(R"(.*\? *(16|0) *: *(16|0).*)");

// Checks one asm statement's instructions against the ISA's syntax; adds
// each instruction's family to `seen`.
void CheckAsm(const AsmStatement& a, const std::string& where, std::set<std::string>* seen) {
  const std::string ctx = absl::StrCat(where, " ", a.function, ": ", a.ptx);
  if (a.ptx.empty()) return;  // the accumulators' pins: no instruction
  std::set<std::string> predicates;
  std::vector<Instruction> ins = ParsePtx(a.ptx, &predicates);
  std::set<int> referenced;
  // %N: asm operand N, its constraint letter and expression.
  auto ref = [&](const std::string& s, int* n) {
    if (s.size() < 2 || s[0] != '%' || !absl::SimpleAtoi(s.substr(1), n)) return false;
    referenced.insert(*n);
    return *n < int(a.operands.size());
  };
  auto letter = [&](int n) {
    std::string c = a.operands[size_t(n)].constraint;
    c.erase(std::remove_if(c.begin(), c.end(),
                           [](char ch) { return ch == '=' || ch == '+' || ch == '&'; }),
            c.end());
    return c;
  };
  auto is_output = [&](int n) { return size_t(n) < a.outputs; };
  auto read_write = [&](int n) { return absl::StartsWith(a.operands[size_t(n)].constraint, "+"); };
  // A vector operand: each %N of `letter`, operand k's expression
  // `<base>[k]` (the registers in the ISA's element order).
  auto vector_of = [&](const std::vector<std::string>& regs, size_t count, const std::string& l,
                       const char* what) {
    ASSERT_EQ(regs.size(), count) << what << " registers in " << ctx;
    std::string base;
    for (size_t k = 0; k < regs.size(); ++k) {
      int n = -1;
      ASSERT_TRUE(ref(regs[k], &n)) << what << ": " << regs[k] << " in " << ctx;
      EXPECT_EQ(letter(n), l) << what << " register " << k << " in " << ctx;
      std::smatch m;
      const std::string& e = a.operands[size_t(n)].expr;
      ASSERT_TRUE(std::regex_match(e, m, kElement)) << e << " in " << ctx;
      if (k == 0) base = m[1];
      EXPECT_EQ(m[1], base) << what << " in " << ctx;
      EXPECT_EQ(std::stoul(m[2]), k) << what << " register " << k << " is " << e << " in " << ctx;
    }
  };
  auto scalar = [&](const std::vector<std::string>& op, const std::string& l, const char* what) {
    ASSERT_EQ(op.size(), 1u) << what << " in " << ctx;
    std::string s = op[0];
    if (s.front() == '[') s = std::string(absl::StripAsciiWhitespace(s.substr(1, s.size() - 2)));
    int n = -1;
    ASSERT_TRUE(ref(s, &n)) << what << ": " << s << " in " << ctx;
    EXPECT_EQ(letter(n), l) << what << " in " << ctx;
  };
  auto immediate = [&](const std::vector<std::string>& op, std::set<int> allowed,
                       const char* what) {
    int v = 0;
    if (op.size() != 1 || !absl::SimpleAtoi(op[0], &v)) {
      ADD_FAILURE() << what << " is not an immediate in " << ctx;
      return -1;
    }
    if (!allowed.empty()) {
      EXPECT_TRUE(allowed.count(v)) << what << " = " << v << " in " << ctx;
    }
    return v;
  };
  // .f32 in "f", 16-bit in "h", 32-bit integer / packed in "r", 64-bit in "l".
  auto type_letter = [](const std::string& type) -> std::string {
    if (type == "f32") return "f";
    if (type == "f16" || type == "bf16" || type == "b16") return "h";
    if (type == "u64" || type == "b64" || type == "s64") return "l";
    return "r";
  };
  for (const Instruction& i : ins) {
    const std::vector<std::string> q = absl::StrSplit(i.opcode, '.');
    std::smatch m;
    if (std::regex_match(i.opcode, m, kMma)) {
      // [mma]: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 d, a, b, c
      // (and .f16; .m16n8k8 .tf32): D and C four .f32, A four .f16x2 /
      // .b32, B two ([mma16816], [mma1688] "Fragment" columns).
      const bool k16 = m[1] == "m16n8k16";
      EXPECT_EQ(m[2], m[3]) << ctx;
      EXPECT_TRUE(k16 ? (m[2] == "f16" || m[2] == "bf16") : m[2] == "tf32") << ctx;
      seen->insert(absl::StrCat("mma.", std::string(m[1]), ".", std::string(m[2])));
      ASSERT_EQ(i.operands.size(), 4u) << "d, a, b, c in " << ctx;
      const isa::Fragment& fa = k16 ? isa::kA16 : isa::kATf32;
      const isa::Fragment& fb = k16 ? isa::kB16 : isa::kBTf32;
      vector_of(i.operands[0], size_t(isa::kC.registers), "f", "d");
      vector_of(i.operands[1], size_t(fa.registers), "r", "a");
      vector_of(i.operands[2], size_t(fb.registers), "r", "b");
      vector_of(i.operands[3], size_t(isa::kC.registers), "f", "c");
      for (size_t k = 0; k < i.operands[0].size(); ++k) {
        int n = -1;
        ASSERT_TRUE(ref(i.operands[0][k], &n));
        EXPECT_TRUE(is_output(n)) << "d is written: " << ctx;
        // c the same registers as d: they must be read too.
        if (i.operands[3][k] == i.operands[0][k]) {
          EXPECT_TRUE(read_write(n)) << ctx;
        }
      }
      continue;
    }
    if (std::regex_match(i.opcode, m, kLdmatrix)) {
      // [ldmatrix]: ldmatrix.sync.aligned.shape.num{.trans}{.ss}.type r, [p];
      // r "1, 2, or 4 32-bit registers as per the value of .num".
      const int num = std::stoi(m[1]);
      const bool trans = m[2].matched;
      seen->insert(absl::StrCat("ldmatrix.x", num, trans ? ".trans" : ""));
      EXPECT_EQ(a.function, absl::StrCat("tf_ldmatrix_x", num, trans ? "_trans" : "")) << ctx;
      ASSERT_EQ(i.operands.size(), 2u) << "r, [p] in " << ctx;
      vector_of(i.operands[0], size_t(num), "r", "r");
      ASSERT_EQ(i.operands[1][0].front(), '[') << ctx;
      scalar(i.operands[1], "r", "[p] (a 32-bit .shared address)");
      continue;
    }
    if (std::regex_match(i.opcode, m, kWgmma)) {
      // [wgmma]: wgmma.mma_async.sync.aligned.shape.dtype.bf16.bf16 d,
      // a-desc, b-desc, scale-d, imm-scale-a, imm-scale-b, imm-trans-a,
      // imm-trans-b; .shape m64nNk16, N = 8 .. 256 by 8; d "N/2 .f32
      // registers" ([wgmma-d]); descriptors 64-bit; imm-scale -1 or 1;
      // imm-trans 0 or 1, 1 meaning M- (N-) major ([wgmma-smem]).
      const int n = std::stoi(m[1]);
      seen->insert(absl::StrCat("wgmma.", std::string(m[2])));
      EXPECT_TRUE(n >= 8 && n <= 256 && n % 8 == 0) << ctx;
      EXPECT_EQ(m[2], m[3]) << ctx;
      EXPECT_TRUE(m[2] == "f16" || m[2] == "bf16") << ctx;
      ASSERT_EQ(i.operands.size(), 8u) << ctx;
      vector_of(i.operands[0], size_t(n / 2), "f", "d");
      for (const std::string& r : i.operands[0]) {
        int x = -1;
        ASSERT_TRUE(ref(r, &x));
        EXPECT_TRUE(is_output(x) && read_write(x)) << "d accumulates: " << ctx;
      }
      scalar(i.operands[1], "l", "a-desc");
      scalar(i.operands[2], "l", "b-desc");
      ASSERT_EQ(i.operands[3].size(), 1u);
      int scale_d = 0;
      EXPECT_TRUE(predicates.count(i.operands[3][0]) ||
                  (absl::SimpleAtoi(i.operands[3][0], &scale_d) && scale_d >= 0 && scale_d <= 1))
          << "scale-d: " << i.operands[3][0] << " in " << ctx;
      immediate(i.operands[4], {-1, 1}, "imm-scale-a");
      immediate(i.operands[5], {-1, 1}, "imm-scale-b");
      const int ta = immediate(i.operands[6], {0, 1}, "imm-trans-a");
      const int tb = immediate(i.operands[7], {0, 1}, "imm-trans-b");
      EXPECT_EQ(a.function, codegen::WgmmaName(n, ta == 1, tb == 1)) << ctx;
      continue;
    }
    if (absl::StartsWith(i.opcode, "cp.async.cg.shared") &&
        absl::StrContains(i.opcode, ".global")) {
      // [cp.async]: cp.async.cg.shared{::cta}.global [dst], [src], 16{, src-size};
      // src-size a 32-bit integer, at most cp-size ("Specifying src-size larger
      // than cp-size results in undefined behavior").
      seen->insert("cp.async.cg");
      ASSERT_TRUE(i.operands.size() == 3 || i.operands.size() == 4) << ctx;
      ASSERT_EQ(i.operands[0][0].front(), '[') << ctx;
      ASSERT_EQ(i.operands[1][0].front(), '[') << ctx;
      scalar(i.operands[0], "r", "[dst] (a 32-bit .shared address)");
      scalar(i.operands[1], "l", "[src] (a 64-bit global address)");
      immediate(i.operands[2], {16}, "cp-size (.cg: 16 only)");
      if (i.operands.size() == 4) {
        scalar(i.operands[3], "r", "src-size");
        int n = -1;
        ref(i.operands[3][0], &n);
        EXPECT_TRUE(std::regex_match(a.operands[size_t(n)].expr, kSrcSize))
            << "src-size 0 or 16: " << ctx;
      }
      continue;
    }
    if (i.opcode == "cvta.to.shared.u64") {
      seen->insert("cvta");
      ASSERT_EQ(i.operands.size(), 2u) << ctx;
      scalar(i.operands[1], "l", "a 64-bit generic address");
      continue;
    }
    if (q[0] == "cvt") {
      // cvt{.rnd}.dtype.atype d, a
      seen->insert(i.opcode);
      ASSERT_GE(q.size(), 3u);
      ASSERT_EQ(i.operands.size(), 2u) << ctx;
      const std::string dtype = q[q.size() - 2], atype = q.back();
      int n = -1;
      if (ref(i.operands[0][0], &n)) {
        EXPECT_EQ(letter(n), type_letter(dtype)) << "d in " << ctx;
        EXPECT_TRUE(is_output(n)) << ctx;
      }
      if (ref(i.operands[1][0], &n)) {
        EXPECT_EQ(letter(n), type_letter(atype)) << "a in " << ctx;
      }
      continue;
    }
    if (i.opcode == "setp.ne.b32") {
      seen->insert("setp");
      ASSERT_EQ(i.operands.size(), 3u) << ctx;
      EXPECT_TRUE(predicates.count(i.operands[0][0])) << ctx;
      scalar(i.operands[1], "r", "a .b32 source");
      continue;
    }
    if (i.opcode == "wgmma.fence.sync.aligned" || i.opcode == "wgmma.commit_group.sync.aligned" ||
        i.opcode == "cp.async.commit_group" || i.opcode == "fence.proxy.async.shared::cta") {
      seen->insert(i.opcode);
      EXPECT_TRUE(i.operands.empty()) << ctx;
      continue;
    }
    if (i.opcode == "wgmma.wait_group.sync.aligned" || i.opcode == "cp.async.wait_group") {
      seen->insert(i.opcode);
      ASSERT_EQ(i.operands.size(), 1u) << ctx;
      int v = -1;
      EXPECT_TRUE(absl::SimpleAtoi(i.operands[0][0], &v) && v >= 0) << ctx;
      continue;
    }
    ADD_FAILURE() << "an instruction this check does not know (add its ISA operand list): "
                  << i.opcode << " in " << ctx;
  }
  for (size_t n = 0; n < a.operands.size(); ++n)
    EXPECT_TRUE(referenced.count(int(n))) << "operand %" << n << " unused in " << ctx;
}

// Every inline-asm statement of the CUDA back end — each prelude, the wgmma
// function of every shape, type and majorness, and the kernels emitted for
// f16, bf16 and tf32 mma.sync programs (ldmatrix .x2/.x4, with and without
// .trans) and wgmma programs — has its instruction's operands in the ISA's
// order and number, each register of the constraint its type needs, vector
// registers in element order; and each ldmatrix and wgmma device function
// the kernels call is defined.
TEST(PtxIsaPrelude, InlineAsmOperandsFollowTheIsaSyntax) {
  std::set<std::string> seen;
  int statements = 0;
  auto check_source = [&](const std::string& source, const std::string& where) {
    for (const AsmStatement& a : FindAsm(source)) {
      CheckAsm(a, where, &seen);
      ++statements;
    }
  };
  for (const auto& [text, name] : std::vector<std::pair<const char*, const char*>>{
           {codegen::kCudaPrelude, "kCudaPrelude"},
           {codegen::kCudaVector16Prelude, "kCudaVector16Prelude"},
           {codegen::kCudaFloat16Prelude, "kCudaFloat16Prelude"},
           {codegen::kCudaBFloat16Prelude, "kCudaBFloat16Prelude"},
           {codegen::kCudaSharedPrelude, "kCudaSharedPrelude"},
           {codegen::kCudaWgmmaPrelude, "kCudaWgmmaPrelude"},
           {codegen::kCudaMmaPrelude, "kCudaMmaPrelude"},
           {codegen::kCudaMmaTf32Prelude, "kCudaMmaTf32Prelude"}})
    check_source(text, name);
  for (int64_t n = 8; n <= 256; n += 8) {
    for (const char* type : {"f16", "bf16"}) {
      for (int mn = 0; mn < 4; ++mn)
        check_source(codegen::WgmmaFunction(n, type, mn & 1, mn & 2),
                     codegen::WgmmaName(n, mn & 1, mn & 2));
    }
  }
  struct Program {
    std::string spec, target;
    int wgmma;
    int64_t frags_n;
  };
  for (const Program& p : std::vector<Program>{
           {"matmul(M=64,N=64,K=64,dtype=float16)", "cuda -arch=sm_80", 0, 4},
           {"matmul(M=64,N=48,K=64,transpose_a=1,dtype=bfloat16)", "cuda -arch=sm_80", 0, 3},
           {"matmul(M=64,N=64,K=64,transpose_b=1,dtype=float16)", "cuda -arch=sm_80", 0, 4},
           {"matmul(M=64,N=48,K=64,dtype=float16)", "cuda -arch=sm_80", 0, 3},
           {"matmul(M=32,N=32,K=32,dtype=tf32)", "cuda -arch=sm_80", 0, 4},
           {"matmul(M=128,N=64,K=64,transpose_a=1,dtype=bfloat16)",
            "cuda -arch=sm_90 -max-shared-memory-per-block=232448", 1, 8}}) {
    const ir::Target target = Cuda(p.target);
    schedule::TensorCoreTiling t = schedule::DefaultTensorCoreTiling(Dag(p.spec), target);
    if (p.wgmma) {
      t.warps_m = 4, t.warps_n = 1, t.frags_m = 2, t.k_steps = 2, t.pad = 0, t.stages = 2;
      t.ldmatrix = 0, t.async_copy = 1, t.wgmma = 1;
    }
    t.frags_n = p.frags_n;
    auto lowered = LowerTensorCore(p.spec, target, t);
    ASSERT_TRUE(lowered.ok()) << p.spec << ": " << lowered.status();
    auto program = codegen::EmitCuda(lowered->dag, lowered->program, target);
    ASSERT_TRUE(program.ok()) << p.spec << ": " << program.status();
    check_source(program->source, p.spec);
    const std::regex call(
        R"((tf_ldmatrix_x\d(?:_trans)?|tf_wgmma_m64n\d+k16(?:_amn)?(?:_bmn)?)\()");
    for (auto it = std::sregex_iterator(program->source.begin(), program->source.end(), call);
         it != std::sregex_iterator(); ++it) {
      EXPECT_FALSE(DeviceFunction(program->source, (*it)[1]).empty())
          << p.spec << " calls " << (*it)[1] << ", which it does not define";
    }
  }
  for (const char* family :
       {"mma.m16n8k16.f16", "mma.m16n8k16.bf16", "mma.m16n8k8.tf32", "ldmatrix.x2", "ldmatrix.x4",
        "ldmatrix.x2.trans", "ldmatrix.x4.trans", "wgmma.f16", "wgmma.bf16", "cp.async.cg", "cvta",
        "setp", "cvt.rna.tf32.f32", "cvt.rn.bf16.f32", "cvt.f32.f16", "cvt.rn.f16.f32",
        "wgmma.wait_group.sync.aligned", "cp.async.wait_group", "fence.proxy.async.shared::cta"})
    EXPECT_TRUE(seen.count(family)) << family << " not checked";
  EXPECT_GT(statements, 300);
}

// ===================================================================
// The checks can fail: each shown a broken copy of what it checks.
// ===================================================================

// The failures `f` reports (intercepted: they do not fail this test).
std::vector<std::string> Failures(const std::function<void()>& f) {
  ::testing::TestPartResultArray results;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
    f();
  }
  std::vector<std::string> out;
  for (int i = 0; i < results.size(); ++i) {
    if (results.GetTestPartResult(i).failed())
      out.push_back(results.GetTestPartResult(i).message());
  }
  return out;
}

// `text` with the first `from` replaced by `to` (which must be there).
std::string Broken(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "not in the text: " << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

bool AnyMentions(const std::vector<std::string>& failures, const std::string& what) {
  for (const std::string& f : failures) {
    if (absl::StrContains(f, what)) return true;
  }
  return false;
}

TEST(PtxIsaSelfCheck, AsmCheckCatchesOperandMistakes) {
  auto failures = [](const std::string& text) {
    return Failures([&] {
      std::set<std::string> seen;
      for (const AsmStatement& a : FindAsm(text)) CheckAsm(a, "broken", &seen);
    });
  };
  // mma.sync's B registers out of element order.
  EXPECT_TRUE(AnyMentions(
      failures(Broken(codegen::kCudaMmaPrelude, "{%8, %9}, {%0", "{%9, %8}, {%0")), "b register"));
  // An .x2 ldmatrix given four registers.
  EXPECT_TRUE(
      AnyMentions(failures(Broken(codegen::kCudaMmaPrelude, "m8n8.x4.shared", "m8n8.x2.shared")),
                  "r registers"));
  // wgmma's imm-trans-a and imm-trans-b swapped.
  const std::string wgmma = codegen::WgmmaFunction(64, "f16", true, false);
  EXPECT_TRUE(
      AnyMentions(failures(Broken(wgmma, "1, 1, 1, 0;", "1, 1, 0, 1;")), "tf_wgmma_m64n64k16"));
  // A descriptor passed as a 32-bit register.
  EXPECT_TRUE(AnyMentions(failures(Broken(wgmma, "\"l\"(da)", "\"r\"(da)")), "a-desc"));
  // cp.async.cg with 8 bytes.
  EXPECT_TRUE(
      AnyMentions(failures(Broken(codegen::kCudaSharedPrelude, "16, %2;", "8, %2;")), "cp-size"));
  // A 16-bit source in a 32-bit register.
  EXPECT_TRUE(
      AnyMentions(failures(Broken(codegen::kCudaFloat16Prelude, "\"h\"(h)", "\"r\"(h)")), "a in"));
  // An instruction the check does not know.
  EXPECT_TRUE(AnyMentions(failures(Broken(codegen::kCudaFloat16Prelude, "cvt.f32.f16", "mov.b32")),
                          "does not know"));
}

TEST(PtxIsaSelfCheck, HelperCheckCatchesLayoutMistakes) {
  // a4 and a5 swapped in their register; tf32's a1 from a2's place; the
  // descriptor's LBO field given the SBO.
  const std::string mma =
      Broken(codegen::kCudaMmaPrelude,
             "r[2] = tf_pack_h2(a[g * a_r + (t + 8) * a_c], a[g * a_r + (t + 9) * a_c]);",
             "r[2] = tf_pack_h2(a[g * a_r + (t + 9) * a_c], a[g * a_r + (t + 8) * a_c]);");
  const std::string tf32 =
      Broken(codegen::kCudaMmaTf32Prelude, "r[1] = tf_tf32(a[(g + 8) * a_r + t * a_c]);",
             "r[1] = tf_tf32(a[g * a_r + (t + 4) * a_c]);");
  const std::string wgmma =
      Broken(codegen::kCudaWgmmaPrelude, "((lbo & 0x3FFFFu) >> 4)", "((sbo & 0x3FFFFu) >> 4)");
  const std::vector<std::string> failures =
      Failures([&] { CheckPreludeHelpers(codegen::kCudaPrelude, mma, tf32, wgmma); });
  EXPECT_TRUE(AnyMentions(failures, "tf_mma_m16n8k16_frag_a order 0 lane 0 element 4"))
      << failures.size();
  EXPECT_TRUE(AnyMentions(failures, "tf_mma_m16n8k8_tf32_frag_a order 1 lane 0 element 1"));
  EXPECT_TRUE(AnyMentions(failures, "tf_wgmma_desc(start 0, lbo 256, sbo 128)"));
  EXPECT_FALSE(AnyMentions(failures, "tf_mma_m16n8k16_frag_b"));
}

// Rewrites every ldmatrix load of `s` with `change`.
ir::Stmt EditLdmatrix(const ir::Stmt& s, const std::function<void(ir::StmtNode*)>& change) {
  auto n = std::make_shared<ir::StmtNode>(*s);
  if (n->kind == ir::StmtKind::kMma && n->mma_ldmatrix) change(n.get());
  for (ir::Stmt& b : n->body) b = EditLdmatrix(b, change);
  return n;
}

TEST(PtxIsaSelfCheck, LdmatrixCheckCatchesWrongLaneRows) {
  auto plain = LowerLdmatrixCase(LdmatrixCases()[0]);
  auto swizzled = LowerLdmatrixCase(LdmatrixCases()[5]);
  ASSERT_TRUE(plain.ok() && swizzled.ok());
  // Each lane naming the next matrix row; half a row on; the swizzle
  // forgotten on reading; the operand's strides swapped (.trans flipped).
  const LdmatrixReport next_row =
      ReadLdmatrixLoads(EditLdmatrix(plain->program, [](ir::StmtNode* n) {
        n->mma_row = n->mma_row + ir::IntImm(n->mma_a_strides[0] == 1 ? n->mma_a_strides[1]
                                                                      : n->mma_a_strides[0]);
      }));
  EXPECT_GT(next_row.mismatches, 0);
  const LdmatrixReport half_row = ReadLdmatrixLoads(EditLdmatrix(
      plain->program, [](ir::StmtNode* n) { n->mma_row = n->mma_row + ir::IntImm(4); }));
  EXPECT_GT(half_row.misaligned, 0);
  const LdmatrixReport unswizzled = ReadLdmatrixLoads(
      EditLdmatrix(swizzled->program, [](ir::StmtNode* n) { n->mma_swizzle = 0; }));
  EXPECT_GT(unswizzled.mismatches, 0);
  const LdmatrixReport transposed =
      ReadLdmatrixLoads(EditLdmatrix(plain->program, [](ir::StmtNode* n) {
        std::swap(n->mma_a_strides[0], n->mma_a_strides[1]);
      }));
  EXPECT_GT(transposed.mismatches, 0);
}

}  // namespace
}  // namespace tunefarm
