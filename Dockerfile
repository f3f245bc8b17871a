# perfwatch: `perfwatch serve` (the processor) and `perfwatch dashboard` in one image.
#
#   docker build -t perfwatch:0.1.0 .
#   docker run --rm perfwatch:0.1.0 --help
#
# The base image is pinned to a patch release; rebuild to pick up security fixes.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

# --- build: install perfwatch and its dependencies into a virtual environment --------------
# The E-Divisive kernels are a C extension (Cython) compiled here; the runtime stage gets the
# compiled module and no compiler.
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/perfwatch
ENV PATH=/opt/perfwatch/bin:$PATH
WORKDIR /src
# Dependencies first, so editing the sources does not reinstall them.
COPY pyproject.toml README.md ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
       > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt
COPY setup.py ./
COPY src ./src
RUN pip install --no-deps . && perfwatch --version
# Smoke test of the installed (compiled) detector on the example data.
COPY examples/nightly.csv ./examples/nightly.csv
RUN perfwatch analyze /src/examples/nightly.csv

# --- runtime: the environment only, run as an unprivileged user ------------------------------
FROM ${PYTHON_IMAGE}
ARG UID=10001
RUN groupadd --system --gid ${UID} perfwatch \
    && useradd --system --uid ${UID} --gid perfwatch --home-dir /var/lib/perfwatch \
       --create-home --shell /usr/sbin/nologin perfwatch
COPY --from=build /opt/perfwatch /opt/perfwatch
ENV PATH=/opt/perfwatch/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    XDG_DATA_HOME=/var/lib/perfwatch
USER ${UID}:${UID}
WORKDIR /var/lib/perfwatch
VOLUME ["/var/lib/perfwatch"]
# 8050: dashboard; 9464: the processor's Prometheus /metrics (when --metrics-port 9464).
EXPOSE 8050 9464
ENTRYPOINT ["perfwatch"]
CMD ["serve", "--metrics-host", "0.0.0.0", "--metrics-port", "9464"]
