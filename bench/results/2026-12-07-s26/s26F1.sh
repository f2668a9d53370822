#!/usr/bin/env bash
# Session 26, FA4 call 1 of 2: unpack part A of ../shared/tools/fa4-pack.sh's
# site into $HOME/fa4 (carry: .device/fa4/partA.tar.xz .device/s26F1.sh).
mkdir -p $HOME/fa4 && tar -C $HOME/fa4 -xJf .device/fa4/partA.tar.xz && du -sh $HOME/fa4
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv,noheader
