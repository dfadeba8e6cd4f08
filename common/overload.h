// Overload{f, g, ...}: one callable from several lambdas, for std::visit.
#pragma once

namespace tunefarm {

template <class... F>
struct Overload : F... {
  using F::operator()...;
};
template <class... F>
Overload(F...) -> Overload<F...>;

}  // namespace tunefarm
