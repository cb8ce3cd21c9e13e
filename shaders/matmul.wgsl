// placeholder: filled in by the matmul kernel family
