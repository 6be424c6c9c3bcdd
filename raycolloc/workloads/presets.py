"""The study's workloads (Table 1 of the EuroMLSys '24 paper) and tiny CPU presets.

S: ResNet26 / CIFAR-10; M: ResNet50 and EfficientNetV2-S / ImageNet64 (64x64);
L: ResNet152 and CaiT-XXS24 / ImageNet (224x224); XL: DLRM / Criteo (Kaggle cardinalities).
``memory_gib`` is a rough single-job peak at the preset batch size, used only to refuse cells
whose jobs cannot fit before starting them; the real peak is measured and recorded.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from raycolloc.workloads.registry import WorkloadSpec, register_workload

__all__ = ["CRITEO_KAGGLE_TABLE_SIZES"]

IMAGENET_TRAIN = 1_281_167
# Rows per categorical feature of the Criteo Kaggle (Display Advertising Challenge) train set.
CRITEO_KAGGLE_TABLE_SIZES = (
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
    27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
)


def _model(name: str, *args: Any) -> Any:
    """Build a model of raycolloc.workloads.models; imported here so that listing and validating
    workloads never imports torch."""
    from raycolloc.workloads import models

    return getattr(models, name)(*args)


def _vision(name: str, model: str, dataset: str, res: int, classes: int, size: int, batch: int,
            cls: str, memory_gib: float) -> WorkloadSpec:
    return WorkloadSpec(
        name=name, family="vision", dataset=dataset, sample_shape=(3, res, res), num_classes=classes,
        dataset_size=size, batch_size=batch, size=cls, build_model=partial(_model, "timm_model", model, classes),
        memory_gib=memory_gib, description=f"timm {model} on {dataset} {res}x{res}",
    )


@register_workload
def resnet26_cifar10() -> WorkloadSpec:
    return _vision("resnet26_cifar10", "resnet26", "cifar10", 32, 10, 50_000, 128, "S", 1.5)


@register_workload
def resnet50_imagenet64() -> WorkloadSpec:
    return _vision("resnet50_imagenet64", "resnet50", "imagenet64", 64, 1000, IMAGENET_TRAIN, 128, "M", 4.0)


@register_workload
def efficientnetv2s_imagenet64() -> WorkloadSpec:
    return _vision("efficientnetv2s_imagenet64", "efficientnetv2_s", "imagenet64", 64, 1000, IMAGENET_TRAIN,
                   128, "M", 5.0)


@register_workload
def resnet152_imagenet() -> WorkloadSpec:
    return _vision("resnet152_imagenet", "resnet152", "imagefolder", 224, 1000, IMAGENET_TRAIN, 64, "L", 14.0)


@register_workload
def cait_xxs24_imagenet() -> WorkloadSpec:
    return _vision("cait_xxs24_imagenet", "cait_xxs24_224", "imagefolder", 224, 1000, IMAGENET_TRAIN, 64, "L",
                   12.0)


@register_workload
def dlrm_criteo() -> WorkloadSpec:
    return WorkloadSpec(
        name="dlrm_criteo", family="dlrm", dataset="criteo", sample_shape=(13,), num_classes=1,
        dataset_size=45_840_617, batch_size=2048, size="XL", lr=0.1,
        table_sizes=CRITEO_KAGGLE_TABLE_SIZES, memory_gib=6.0,
        build_model=partial(_model, "DLRM", CRITEO_KAGGLE_TABLE_SIZES, 16),
        description="DLRM (26 embedding bags of dim 16, MLPs 512-256-64 / 512-256) on Criteo Kaggle",
    )


@register_workload
def tiny_cnn() -> WorkloadSpec:
    return WorkloadSpec(
        name="tiny_cnn", family="vision", dataset="cifar10", sample_shape=(3, 32, 32), num_classes=10,
        dataset_size=1024, batch_size=32, size="tiny", build_model=partial(_model, "TinyCNN", 10), memory_gib=0.05,
        description="3-layer CNN on CIFAR-10-shaped data (CPU demo)",
    )


@register_workload
def tiny_dlrm() -> WorkloadSpec:
    tables = (100,) * 26
    return WorkloadSpec(
        name="tiny_dlrm", family="dlrm", dataset="criteo", sample_shape=(13,), num_classes=1,
        dataset_size=2048, batch_size=64, size="tiny", lr=0.05, table_sizes=tables, memory_gib=0.05,
        build_model=partial(_model, "DLRM", tables, 8, 13, (32,), (32,)),
        description="DLRM with 26 tables of 100 rows (CPU demo)",
    )
