"""Write a small Keras CNN to a ``.keras`` file for ``onnxsurgeon convert tf``:

    python examples/make_keras.py OUT.keras
"""

import sys

import keras


def build() -> keras.Model:
    keras.utils.set_random_seed(0)
    x = keras.Input((32, 32, 3), name="image")
    h = keras.layers.Conv2D(8, 3, padding="same", activation="relu", name="conv5")(x)
    h = keras.layers.GlobalAveragePooling2D(name="gap")(h)
    return keras.Model(x, keras.layers.Dense(10, name="logits")(h))


if __name__ == "__main__":
    build().save(sys.argv[1])
