"""A PyTorch script as people write it, with the copy-on-read problem (pytorch issue 13246): the
Dataset holds a Python list of dicts and 2 DataLoader workers read it, so each worker ends up with
its own copy of the pages it reads (reading an object writes its reference count)."""

import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Records(Dataset):
    def __init__(self, n):
        self.items = [{"features": [float(i % 7), float(i % 11), float(i % 13), float(i % 17)],
                       "label": i % 2, "name": f"record-{i}"} for i in range(n)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]


def collate(items):
    return torch.tensor([item["features"] for item in items]), torch.tensor([item["label"] for item in items])


if __name__ == "__main__":
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
    loader = DataLoader(Records(size), batch_size=500, shuffle=True, num_workers=2, collate_fn=collate)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        print(f"epoch {epoch} done")
