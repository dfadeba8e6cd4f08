# Cross-building the device agent for 64-bit Arm boards (Jetson Orin and
# Xavier, Raspberry Pi 4/5, Graviton) on a Debian 12 x86-64 machine:
#
#   scripts/install-deps.sh --agent-aarch64     # the cross compiler, qemu-user
#                                               # and the arm64 libraries
#   cmake -G Ninja -S . -B build-aarch64 -DTUNEFARM_AGENT_ONLY=ON \
#         -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
#   ninja -C build-aarch64
#   scripts/make-agent-bundle.sh build-aarch64/bin tunefarm-agent-aarch64.tar.gz
#
# The libraries (gRPC, protobuf, Abseil, spdlog, OpenSSL) are Debian 12's
# arm64 builds installed beside the host's (multiarch,
# /usr/lib/aarch64-linux-gnu); protoc and grpc_cpp_plugin are the host's.
# The binaries need those libraries (and glibc 2.36) on the board: older
# systems (JetPack 5 and 6: Ubuntu 20.04 and 22.04) lack them, so boards get
# the bundle, which carries them and its own loader (docs/agent-install.md).
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
