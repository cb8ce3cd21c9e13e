// placeholder: filled in by the optim kernel family
