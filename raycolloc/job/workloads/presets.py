"""The study's workloads (Table 1 of the EuroMLSys '24 paper) and tiny CPU presets, as named
compositions of a model and a dataset.

S: ResNet26 / CIFAR-10; M: ResNet50 and EfficientNetV2-S / ImageNet64 (64x64);
L: ResNet152 and CaiT-XXS24 / ImageNet (224x224); XL: DLRM / Criteo (Kaggle cardinalities).
The size class is the study's; memory is estimated from the model itself
(:mod:`raycolloc.job.workloads.estimate`), never typed in here.
"""

from __future__ import annotations

from functools import partial

from raycolloc.job.workloads.compose import build_model, compose
from raycolloc.workload_kinds import ModelWorkload

__all__ = ["CRITEO_KAGGLE_TABLE_SIZES", "PRESETS"]

# Rows per categorical feature of the Criteo Kaggle (Display Advertising Challenge) train set.
CRITEO_KAGGLE_TABLE_SIZES = (
    1460,
    583,
    10131227,
    2202608,
    305,
    24,
    12517,
    633,
    3,
    93145,
    5683,
    8351593,
    3194,
    27,
    14992,
    5461306,
    10,
    5652,
    2173,
    4,
    7046547,
    18,
    15,
    286181,
    105,
    142572,
)


def resnet26_cifar10() -> ModelWorkload:
    return compose("resnet26", "cifar10", name="resnet26_cifar10", size="S")


def resnet50_imagenet64() -> ModelWorkload:
    return compose("resnet50", "imagenet64", name="resnet50_imagenet64", size="M")


def efficientnetv2s_imagenet64() -> ModelWorkload:
    return compose("efficientnetv2_s", "imagenet64", name="efficientnetv2s_imagenet64", size="M")


def resnet152_imagenet() -> ModelWorkload:
    return compose("resnet152", "imagenet", name="resnet152_imagenet", size="L")


def cait_xxs24_imagenet() -> ModelWorkload:
    return compose("cait_xxs24_224", "imagenet", name="cait_xxs24_imagenet", size="L")


def dlrm_criteo() -> ModelWorkload:
    return ModelWorkload(
        name="dlrm_criteo",
        family="dlrm",
        dataset="criteo",
        sample_shape=(13,),
        num_classes=1,
        dataset_size=45_840_617,
        batch_size=2048,
        size="XL",
        lr=0.1,
        model="dlrm",
        table_sizes=CRITEO_KAGGLE_TABLE_SIZES,
        build_model=partial(build_model, "DLRM", CRITEO_KAGGLE_TABLE_SIZES, 16),
        description="DLRM (26 embedding bags of dim 16, MLPs 512-256-64 / 512-256) on Criteo Kaggle",
    )


def tiny_cnn() -> ModelWorkload:
    return ModelWorkload(
        name="tiny_cnn",
        family="vision",
        dataset="cifar10",
        sample_shape=(3, 32, 32),
        num_classes=10,
        dataset_size=1024,
        batch_size=32,
        size="tiny",
        model="tiny_cnn",
        build_model=partial(build_model, "TinyCNN", 10),
        description="3-layer CNN on CIFAR-10-shaped data (CPU demo)",
    )


def tiny_dlrm() -> ModelWorkload:
    tables = (100,) * 26
    return ModelWorkload(
        name="tiny_dlrm",
        family="dlrm",
        dataset="criteo",
        sample_shape=(13,),
        num_classes=1,
        dataset_size=2048,
        batch_size=64,
        size="tiny",
        lr=0.05,
        table_sizes=tables,
        model="dlrm",
        build_model=partial(build_model, "DLRM", tables, 8, 13, (32,), (32,)),
        description="DLRM with 26 tables of 100 rows (CPU demo)",
    )


# Every preset, registered under its function's name by :mod:`raycolloc.job.workloads.registry`.
PRESETS = (
    resnet26_cifar10,
    resnet50_imagenet64,
    efficientnetv2s_imagenet64,
    resnet152_imagenet,
    cait_xxs24_imagenet,
    dlrm_criteo,
    tiny_cnn,
    tiny_dlrm,
)
