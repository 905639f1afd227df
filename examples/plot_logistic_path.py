"""
Sparse logistic regression: a regularisation path
=================================================

:class:`msm_gpu.SparseLogisticRegression` fits an l1-, l0- or lp-penalised logistic
regression by proximal Newton (:func:`msm_gpu.minimize`), each Newton model minimised by
MSM sweeps.  Its loss is the *mean* logistic loss, so scikit-learn's
``LogisticRegression(C=C, penalty="l1")`` corresponds to ``alpha = 1 / (C m)`` for ``m``
training samples.

On the breast-cancer data (30 standardised features) we fit a few values of ``C`` with the
l1 and the l0 penalty and plot how many coefficients are nonzero and the accuracy on
held-out samples.
"""

import time

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

import msm_gpu as mg

X, y = load_breast_cancer(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=0)
scaler = StandardScaler().fit(X_train)
X_train, X_test = scaler.transform(X_train), scaler.transform(X_test)
m = X_train.shape[0]

Cs = np.logspace(-2, 1, 7)
path = {}
t0 = time.perf_counter()
for penalty in ("l1", "l0"):
    rows = []
    for C in Cs:
        clf = mg.SparseLogisticRegression(penalty=penalty, alpha=1.0 / (C * m))
        clf.fit(X_train, y_train)
        rows.append((np.count_nonzero(clf.coef_), clf.score(X_test, y_test)))
    path[penalty] = np.array(rows)
print(f"{2 * len(Cs)} fits in {time.perf_counter() - t0:.2f} s")
for penalty, rows in path.items():
    print(penalty, "nonzeros:", rows[:, 0].astype(int).tolist())
    print(penalty, "test accuracy:", np.round(rows[:, 1], 3).tolist())

# %%
fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(9, 3.5))
for penalty, rows in path.items():
    ax0.semilogx(Cs, rows[:, 0], "o-", label=penalty)
    ax1.semilogx(Cs, rows[:, 1], "o-", label=penalty)
ax0.set_xlabel("C  (alpha = 1 / (C m))")
ax0.set_ylabel("nonzero coefficients (of 30)")
ax1.set_xlabel("C  (alpha = 1 / (C m))")
ax1.set_ylabel("test accuracy")
ax0.legend()
fig.tight_layout()
plt.show()
