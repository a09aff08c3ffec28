#!/bin/sh
# Writes sys/: a two-socket host's PCI topology as sysfs links it, for `podnet devices --gpus`.
# Socket 0: a PCIe switch (root port 38:00.0, upstream 39:00.0) with mlx5_0 (3b:00.0) and a GPU
# (3c:00.0) on two downstream ports: PIX. Socket 1: a GPU (d8:00.0) and mlx5_1 (d9:00.0) on
# two root ports of one root complex: PHB. Across the sockets: SYS.
set -eu
cd "$(dirname "$0")"
rm -rf sys
fn() { # fn PATH-UNDER-devices CLASS VENDOR NUMA
  d=sys/devices/$1; mkdir -p "$d"
  echo "$2" > "$d/class"; echo "$3" > "$d/vendor"; echo "$4" > "$d/numa_node"
  mkdir -p sys/bus/pci/devices; bdf=$(basename "$1")
  ln -s "../../../devices/$1" "sys/bus/pci/devices/$bdf"
}
rdma() { # rdma NAME PATH-UNDER-devices
  mkdir -p "sys/devices/$2/infiniband/$1/ports/1" sys/class/infiniband
  echo Ethernet > "sys/devices/$2/infiniband/$1/ports/1/link_layer"
  ln -s ../.. "sys/devices/$2/infiniband/$1/device"
  ln -s "../../devices/$2/infiniband/$1" "sys/class/infiniband/$1"
}
fn pci0000:38/0000:38:00.0 0x060400 0x8086 0
fn pci0000:38/0000:38:00.0/0000:39:00.0 0x060400 0x10b5 0
fn pci0000:38/0000:38:00.0/0000:39:00.0/0000:3a:00.0 0x060400 0x10b5 0
fn pci0000:38/0000:38:00.0/0000:39:00.0/0000:3a:01.0 0x060400 0x10b5 0
fn pci0000:38/0000:38:00.0/0000:39:00.0/0000:3a:00.0/0000:3b:00.0 0x020000 0x15b3 0
fn pci0000:38/0000:38:00.0/0000:39:00.0/0000:3a:01.0/0000:3c:00.0 0x030200 0x10de 0
fn pci0000:d7/0000:d7:00.0 0x060400 0x8086 1
fn pci0000:d7/0000:d7:01.0 0x060400 0x8086 1
fn pci0000:d7/0000:d7:00.0/0000:d8:00.0 0x030200 0x10de 1
fn pci0000:d7/0000:d7:01.0/0000:d9:00.0 0x020000 0x15b3 1
rdma mlx5_0 pci0000:38/0000:38:00.0/0000:39:00.0/0000:3a:00.0/0000:3b:00.0
rdma mlx5_1 pci0000:d7/0000:d7:01.0/0000:d9:00.0
