"""An image's plan (crop, size, flip) is drawn from its pixel size as torchvision's reference transforms draw it,
and a reduced decode is allowed only where the plan still downscales."""
import pytest
import torch
from torchvision import transforms

from basetrainer.data.images.crops import Plan, Recipe, sample_plan

SIZES = [(500, 375), (375, 500), (333, 500), (640, 427), (224, 224), (1200, 900)]
ELONGATED = [(1000, 60), (60, 1000), (3, 2)]  # where 10 draws can all miss and the central crop is taken


@pytest.mark.parametrize("crop_scale", [(0.08, 1.0), (0.25, 1.0), (0.9, 1.0)])
def test_imagenet_training_crops_are_those_of_random_resized_crop_from_the_same_seed(crop_scale):
    recipe = Recipe(size=(224, 224), train=True, augmentation="imagenet", hflip=True, crop_scale=crop_scale)
    reference = transforms.RandomResizedCrop(224, scale=crop_scale)
    for width, height in SIZES + ELONGATED:
        torch.manual_seed(width)
        plans = [sample_plan(recipe, width, height) for _ in range(300)]
        torch.manual_seed(width)
        expected = []
        for _ in range(300):
            box = reference.get_params(torch.empty(1, height, width), reference.scale, reference.ratio)
            expected.append((box, bool(torch.rand(1) < 0.5)))
        assert [(plan.crop, plan.flip) for plan in plans] == expected


def test_resize_crop_training_offsets_are_those_of_random_crop_after_the_resize():
    recipe = Recipe(size=(32, 32), train=True, crop_ratio=0.875)
    torch.manual_seed(0)
    plans = [sample_plan(recipe, 40, 40) for _ in range(30)]
    torch.manual_seed(0)
    crop = transforms.RandomCrop(32)
    expected = [crop.get_params(torch.empty(1, 37, 37), (32, 32)) for _ in range(30)]
    assert [plan.crop for plan in plans] == expected
    assert {plan.resize for plan in plans} == {(37, 37)} and not any(plan.flip for plan in plans)


def test_testing_plans_are_fixed_and_keep_the_aspect_ratio_under_imagenet():
    recipe = Recipe(size=(224, 224), train=False, augmentation="imagenet", hflip=True)
    plan = sample_plan(recipe, 500, 375)
    assert plan == sample_plan(recipe, 500, 375)
    assert plan.resize == (256, 341) and plan.crop == (16, 58, 224, 224) and not plan.flip


@pytest.mark.parametrize("augmentation", ["resize_crop", "imagenet"])
@pytest.mark.parametrize("train", [True, False])
def test_a_reduced_decode_never_makes_the_plan_enlarge(augmentation, train):
    recipe = Recipe(size=(64, 64), train=train, augmentation=augmentation)
    torch.manual_seed(1)
    for width, height in SIZES:
        for _ in range(50):
            plan = sample_plan(recipe, width, height)
            factor = plan.reduction(width, height)
            assert factor in (1, 2, 4, 8)
            if factor == 1:
                continue
            if plan.resize is not None:
                assert width / factor >= plan.resize[1] and height / factor >= plan.resize[0]
            else:
                assert plan.crop[3] / factor >= 64 and plan.crop[2] / factor >= 64


def test_no_reduction_when_the_crop_is_barely_larger_than_the_output():
    assert Plan(crop=(0, 0, 300, 300), size=(224, 224)).reduction(500, 375) == 1
    assert Plan(crop=(0, 0, 460, 470), size=(224, 224)).reduction(500, 500) == 2
    assert Plan(crop=(0, 0, 10, 10), size=(1, 1), resize=(16, 16)).reduction(256, 128) == 8


def test_applying_a_plan_to_an_image_decoded_at_half_size_takes_the_same_region():
    image = torch.zeros(3, 200, 400, dtype=torch.uint8)
    image[:, 100:, 200:] = 255  # the bottom-right quarter is white
    plan = Plan(crop=(100, 200, 100, 200), size=(10, 20))
    half = image[:, ::2, ::2]
    assert plan.apply(image).float().mean() == 255
    assert plan.apply(half.contiguous(), original=(400, 200)).float().mean() == 255


def test_a_flipped_plan_mirrors_the_output():
    image = torch.arange(3 * 8 * 8, dtype=torch.uint8).reshape(3, 8, 8)
    straight = Plan(crop=(0, 0, 8, 8), size=(8, 8)).apply(image)
    mirrored = Plan(crop=(0, 0, 8, 8), size=(8, 8), flip=True).apply(image)
    assert straight.dtype == torch.uint8 and torch.equal(mirrored, straight.flip(-1))


def test_an_unknown_augmentation_is_refused():
    with pytest.raises(ValueError, match="augmentation 'autoaugment' is not one of resize_crop, imagenet"):
        Recipe(size=(8, 8), train=True, augmentation="autoaugment")
