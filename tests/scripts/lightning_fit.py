"""A Lightning script as people write it: a LightningModule, train and validation DataLoaders,
Trainer.fit."""

import sys

import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Classifier(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


if __name__ == "__main__":
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    strategy = sys.argv[2] if len(sys.argv) > 2 else "auto"   # ddp_spawn, ddp: two processes that train
    torch.manual_seed(0)
    x = torch.randn(256, 16)
    y = (x[:, :4].sum(dim=1) > 0).long()
    train = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)        # 8 batches
    val = DataLoader(TensorDataset(x[:64], y[:64]), batch_size=32)             # 2 batches
    trainer = pl.Trainer(max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu", strategy=strategy,
                         devices=2 if strategy.startswith("ddp") else "auto")
    trainer.fit(Classifier(), train, val)
