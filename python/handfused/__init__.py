"""handfused: the tutorial's fused models inside PyTorch.

One module per chapter whose C library is built (`make lib CH=N`, build/libchNN.so):

    handfused.ch01   KernelBench level 2 #58: ConvTranspose3d -> LogSumExp -> x sigmoid(x+3)/6
                     -> -bias -> clamp
    handfused.ch02   KernelBench level 2 #43: Conv3d -> MaxPool3d -> LogSumExp over channels
                     -> ReLU
    handfused.ch03   KernelBench level 2 #79: Conv3d -> x multiplier -> InstanceNorm3d -> clamp
                     -> x multiplier -> max over channels
    handfused.ch04   KernelBench level 2 #92: Conv2d -> GroupNorm -> Tanh -> HardSwish
                     -> + the conv's output -> LogSumExp
    handfused.ch05   KernelBench level 2 #38: AvgPool3d -> ConvTranspose3d -> clamp -> softmax
                     over each channel's positions -> x scale

Each module holds a ModelNew with the constructor and parameters of KernelBench's Model for that
problem, its forward and backward in the chapter's kernels. This package imports without
PyTorch; the chapter modules need it (python/README.md).
"""
