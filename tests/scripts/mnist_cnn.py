"""Keras' mnist_cnn example written in PyTorch, as people write it, on random 28x28 images (the
real data set would need a download): two conv layers, max-pool, two dense layers, Adadelta."""

import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 2
samples = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
torch.manual_seed(0)
images, labels = torch.randn(samples, 1, 28, 28), torch.randint(0, 10, (samples,))
loader = DataLoader(TensorDataset(images, labels), batch_size=128, shuffle=True)
model = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Dropout(0.25), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Dropout(0.5),
                      nn.Linear(128, 10))
optimizer = torch.optim.Adadelta(model.parameters())
for epoch in range(epochs):
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    print(f"epoch {epoch} done")
