//===- catch_main.cpp - Catch2 entry point for flashjit's tests ------------===//
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
