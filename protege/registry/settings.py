"""Plugin settings: what each plugin declares (``plugin_settings``), checked against its
``[plugins.NAME]`` table of ``protege.toml`` when the manifest is built."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from protege.config import Config, secret_keys, structure_settings
from protege.errors import ConfigError, did_you_mean
from protege.frozen import mutable_parts
from protege.plugins import PluginHost, PluginStatus, normalize
from protege.reprs import fields_repr


@attrs.frozen(repr=False)
class PluginSettings:
    """The checked settings of every plugin that declares some, by normalized distribution
    name; why a plugin's settings were refused (that plugin is skipped); and the problems of
    tables that name no plugin able to take them."""

    __repr__ = fields_repr

    values: Mapping[str, Any]
    errors: Mapping[str, str] = attrs.field(factory=dict)
    problems: tuple[str, ...] = ()


def read_plugin_settings(config: Config, plugins: PluginHost) -> PluginSettings:
    """Ask each loaded plugin for its declaration and check its table against it.

    A plugin whose table is wrong, or whose declaration is not one protege can use, is
    named in ``errors``: the manifest reports it and registers none of its tools. The plugin
    host is left as it was, since another configuration may suit the plugin.
    """
    declared = {
        normalize(plugin.source.distribution): value
        for plugin, value in plugins.call_with_plugins("plugin_settings")
        if plugin.status is PluginStatus.OK
    }
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}
    by_name = {normalize(p.source.distribution): p for p in plugins.plugins}
    for name, declaration in declared.items():
        try:
            values[name] = checked(declaration, config.plugins.get(name) or {}, f"plugins.{name}")
        except ConfigError as error:
            errors[name] = f"protege.toml has settings it cannot use: {error}"
    problems = []
    for name in sorted(config.plugins):
        if name in declared:
            continue
        if name not in by_name:
            problems.append(
                f"protege.toml has [plugins.{name}], but no installed plugin is named {name}"
                + did_you_mean(name, by_name)
            )
        elif by_name[name].status == "ok":
            problems.append(
                f"protege.toml has [plugins.{name}], but {name} declares no settings "
                "(no plugin_settings hook): the table is not used"
            )
    return PluginSettings(values=values, errors=errors, problems=tuple(problems))


def checked(declaration: Any, raw: Mapping[str, Any], where: str) -> Any:
    """``raw`` checked against ``declaration`` (an attrs class or a JSON Schema), or
    ``ConfigError`` saying what is wrong, key by key. Settings checked already (an opened
    installation's config, opened again) are taken as they are."""
    if isinstance(declaration, type) and isinstance(raw, declaration):
        return raw
    secrets = secret_keys(raw)
    if secrets:
        raise ConfigError(
            "; ".join(
                f"{where}.{key}: a secret is never written in protege.toml; name the "
                f"environment variable that holds it ({key}_env)"
                for key in secrets
            )
        )
    if isinstance(declaration, type) and attrs.has(declaration):
        made = structure_settings(raw, declaration, where)
        try:
            settable = mutable_parts(made, declaration.__name__)
        except Exception as error:  # a class that cannot even be looked at: only its plugin
            raise ConfigError(
                f"{where}: plugin_settings returned {declaration.__name__}, which could not "
                f"be checked: {type(error).__name__}: {error}"
            ) from None
        if settable:
            raise ConfigError(
                f"{where}: plugin_settings returned {declaration.__name__}, whose fields can "
                f"be set ({', '.join(settable)}): declare it with @attrs.frozen, so that "
                "no tool can change the settings other runs read"
            )
        return made
    if isinstance(declaration, Mapping):
        return _checked_by_schema(dict(declaration), dict(raw), where)
    raise ConfigError(
        f"{where}: plugin_settings must return an attrs class or a JSON Schema (a dict), "
        f"not {type(declaration).__name__}"
    )


def _checked_by_schema(schema: dict[str, Any], raw: dict[str, Any], where: str) -> dict[str, Any]:
    # Heavy (as much as building a manifest of a hundred tools), and only plugins declaring
    # their settings as a JSON Schema need it: `protege tools` should not pay for it.
    import jsonschema

    validator_class = jsonschema.validators.validator_for(schema, jsonschema.Draft202012Validator)
    try:
        validator_class.check_schema(schema)
    except jsonschema.SchemaError as error:
        raise ConfigError(
            f"{where}: the plugin's settings schema is invalid: {error.message}"
        ) from None
    properties = schema.get("properties") or {}
    problems = []
    if "additionalProperties" not in schema:  # unknown keys are errors, as protege's own are
        problems += [
            f"{where}.{key}: extra key, not one of {', '.join(sorted(properties)) or 'none'}"
            + did_you_mean(key, properties)
            for key in sorted(set(raw) - set(properties))
        ]
    for invalid in sorted(validator_class(schema).iter_errors(raw), key=lambda e: list(e.path)):
        path = ".".join(str(part) for part in (where, *invalid.absolute_path))
        problems.append(f"{path}: {invalid.message}")
    if problems:
        raise ConfigError("; ".join(problems))
    defaults = {
        key: spec["default"]
        for key, spec in properties.items()
        if isinstance(spec, Mapping) and "default" in spec
    }
    return {**defaults, **raw}
