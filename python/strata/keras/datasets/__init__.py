from . import fashion_mnist
