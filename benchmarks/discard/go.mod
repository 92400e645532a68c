module ferry/benchmarks/discard

go 1.19
