# The kernel matrix (test/kernels): the platform_linux root tests and the
# Linux e2e suite inside Debian's 5.10, 6.1 and 6.12 kernels under qemu
# (software emulation). Needs root; kernels and root filesystems are cached
# in ~/.cache/crossproxy/kernels-VERSION.
#
# `make test` runs one kernel (6.1, the most common node kernel): all three
# take several times as long, and on a new machine each first prepares its
# root filesystem, which would take the suite past the time one suite of
# `make test` may take (times in test/results/kernels.md). `make
# test-kernels` runs all three and rewrites the report.

TEST_SUITES += test-kernel

.PHONY: test-kernel test-kernels

# test-kernel leaves out the three platform_linux tests that take longest
# under emulation (about two minutes of the guest's time together): the
# pick's chi-square test, the migration under traffic and the batch of many
# chunks; they run on the host in test-unit and in the guests of test-kernels.
KERNEL_SHORT_SKIP := ^(TestPickDistributionIsUniform|TestMigrationToSharedMapsLosesNoConnection|TestBatchOverManyChunks)$$

test-kernel:
	KERNELS_PL_SKIP='$(KERNEL_SHORT_SKIP)' bash test/kernels/kernels.sh run --out bin/kernels/kernels.md 6.1

test-kernels:
	bash test/kernels/kernels.sh run --out test/results/kernels.md 5.10 6.1 6.12

# bench-kernel: one endpoint change at 1k and 10k Services in both layouts,
# inside the 6.1 guest (KERNELS=... for others): does its cost grow with the
# number of Services on that kernel? Emulated, so only the ratios mean
# anything (test/results/scale.md).
.PHONY: bench-kernel
bench-kernel:
	KERNELS_BENCH=1 bash test/kernels/kernels.sh run $${KERNELS:-6.1}
