"""`scheme=A+B`: a Hydra config source that serves a composite of any known schemes, no yaml per pair.

For `scheme/sinusoidal+learned` it returns {name: sinusoidal+learned, parts: [sinusoidal.yaml,
learned.yaml]}, so each part keeps its own defaults and options (`scheme.parts.1.max_len=512`), and
an unknown part falls through to Hydra's usual "Available options in 'scheme'" error. configs/config.yaml
puts it on the search path; importing posenc_cli.config.schema registers it.
"""

from __future__ import annotations

from pathlib import Path

from hydra._internal.sources_registry import SourcesRegistry
from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
from omegaconf import OmegaConf

from posenc_cli.config.location import config_dir


class CompositeSchemes(ConfigSource):
    @staticmethod
    def scheme() -> str:
        return "posenc-composite"

    @staticmethod
    def scheme_dir() -> Path:
        return config_dir() / "scheme"

    def part_files(self, config_path: str) -> list[Path] | None:
        group, _, option = self._normalize_file_name(config_path).removesuffix(".yaml").partition("/")
        if group != "scheme" or "+" not in option:
            return None
        files = [self.scheme_dir() / f"{part}.yaml" for part in option.split("+")]
        return files if all(f.is_file() for f in files) else None

    def load_config(self, config_path: str) -> ConfigResult:
        files = self.part_files(config_path)
        if files is None:
            raise ConfigLoadError(f"not a composite of known schemes: {config_path}")
        name = "+".join(f.stem for f in files)
        config = OmegaConf.create({"name": name, "parts": [OmegaConf.load(f) for f in files]})
        return ConfigResult(
            config=config,
            path=f"{self.scheme()}://{self.path}",
            provider=self.provider,
            header=self._get_header_dict(""),
        )

    def available(self) -> bool:
        return True

    def is_group(self, config_path: str) -> bool:
        return False

    def is_config(self, config_path: str) -> bool:
        return self.part_files(config_path) is not None

    def list(self, config_path: str, results_filter: ObjectType | None) -> list[str]:
        return []


SourcesRegistry.instance().register(CompositeSchemes)
