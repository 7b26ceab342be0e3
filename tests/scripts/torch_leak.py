"""A PyTorch training script as people write it: DataLoader, a validation pass after each epoch,
and the classic leak: losses summed as tensors (`total += loss`, no .item()). In training it keeps
every step's (small) graph; in validation, run without torch.no_grad(), it keeps every batch's
activations, and the per-epoch history keeps them all."""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--samples", type=int, default=1280)
parser.add_argument("--no-leak", action="store_true", help="the fixed script: .item() and torch.no_grad()")
args = parser.parse_args()

torch.manual_seed(0)
x = torch.randn(args.samples, 64)
y = (x[:, :8].sum(dim=1) > 0).long()
train = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True)
val = DataLoader(TensorDataset(x[:512], y[:512]), batch_size=64)

model = nn.Sequential(nn.Linear(64, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = nn.CrossEntropyLoss()

history = []
for epoch in range(args.epochs):
    model.train()
    total_loss = 0
    for xb, yb in train:
        optimizer.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        optimizer.step()
        total_loss += loss.item() if args.no_leak else loss
    model.eval()
    val_loss = 0
    with torch.set_grad_enabled(not args.no_leak):
        for xb, yb in val:
            out = loss_fn(model(xb), yb)
            val_loss += out.item() if args.no_leak else out
    history.append((total_loss, val_loss))
    print(f"epoch {epoch}: train loss {float(total_loss) / len(train):.4f}, val loss {float(val_loss) / len(val):.4f}")
