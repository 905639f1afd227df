"""
Denoising an image by l0 sparse coding
======================================

:func:`msm_gpu.denoise` learns a dictionary on patches of the noisy image (starting from
the overcomplete DCT), codes every overlapping 8 x 8 patch with an l0 penalty (one batched
MSM problem, one column per patch) and averages the rebuilt patches.

The image is a 96 x 96 crop (the roof of the pagoda) of scikit-learn's ``china.jpg``,
made grayscale, with Gaussian noise of standard deviation 20 added.
"""

import time

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_sample_image

import msm_gpu as mg

gray = load_sample_image("china.jpg").mean(axis=2)  # 427 x 640, values 0..255
clean = gray[60:156, 150:246]
sigma = 20.0
noisy = clean + np.random.default_rng(0).normal(scale=sigma, size=clean.shape)

# %%
# ``sigma`` sets the l0 weight (``lam = 5 sigma^2`` by default, in the image's units).
t0 = time.perf_counter()
denoised = mg.denoise(noisy, sigma=sigma, random_state=0)
elapsed = time.perf_counter() - t0
print(f"denoised {clean.shape[0]} x {clean.shape[1]} in {elapsed:.2f} s")
print(f"PSNR noisy {mg.psnr(clean, noisy):.2f} dB -> denoised {mg.psnr(clean, denoised):.2f} dB")

# %%
fig, axes = plt.subplots(1, 3, figsize=(9, 3.6), layout="constrained")
for ax, image, title in zip(
    axes,
    (clean, noisy, denoised),
    (
        "clean",
        f"noisy, sigma = {sigma:g}\n{mg.psnr(clean, noisy):.2f} dB",
        f"msm_gpu.denoise\n{mg.psnr(clean, denoised):.2f} dB",
    ),
    strict=True,
):
    ax.imshow(image, cmap="gray", vmin=0, vmax=255)
    ax.set_title(title)
    ax.axis("off")
plt.show()

# %%
# Colour images keep their dtype: the uint8 photograph itself, noise added and rounded
# back to uint8, is denoised channel by channel (``channel_axis``, scikit-image's
# convention) and comes back as uint8.
colour = load_sample_image("china.jpg")[60:156, 150:246]
rng = np.random.default_rng(1)
noisy_colour = np.clip(np.rint(colour + rng.normal(scale=sigma, size=colour.shape)), 0, 255)
noisy_colour = noisy_colour.astype(np.uint8)
denoised_colour = mg.denoise(noisy_colour, sigma=sigma, channel_axis=-1, random_state=0)
print(denoised_colour.dtype, denoised_colour.shape)
print(
    f"PSNR noisy {mg.psnr(colour, noisy_colour):.2f} dB -> "
    f"denoised {mg.psnr(colour, denoised_colour):.2f} dB"
)

fig, axes = plt.subplots(1, 3, figsize=(9, 3.6), layout="constrained")
for ax, image, title in zip(
    axes,
    (colour, noisy_colour, denoised_colour),
    ("clean", "noisy (uint8)", "denoised (uint8)"),
    strict=True,
):
    ax.imshow(image)
    ax.set_title(title)
    ax.axis("off")
plt.show()
