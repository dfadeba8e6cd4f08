# Cross-building the device agent for 64-bit Arm boards (Jetson Orin and
# Xavier, Raspberry Pi 4/5, Graviton) on a Debian 12 x86-64 machine:
#
#   scripts/install-deps.sh --agent-aarch64     # the cross compiler, qemu-user
#                                               # and the arm64 libraries
#   cmake -G Ninja -S . -B build-aarch64 -DTUNEFARM_AGENT_ONLY=ON \
#         -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
#   ninja -C build-aarch64
#
# The libraries (gRPC, protobuf, Abseil, spdlog, OpenSSL) are Debian's arm64
# builds installed beside the host's (multiarch, /usr/lib/aarch64-linux-gnu);
# protoc and grpc_cpp_plugin are the host's. The binaries need the same
# libraries on the board: Debian 12 or Ubuntu 22.04/24.04 arm64 (JetPack 6
# is Ubuntu 22.04) with the packages of `install-deps.sh --agent`, or build
# there natively (docs/agent-install.md).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Libraries and packages: the arm64 ones only; programs (protoc, the gRPC
# plugin): the host's.
set(CMAKE_FIND_ROOT_PATH /usr/lib/aarch64-linux-gnu /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
# Runs the built programs here (tests, try_run) under qemu-user.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
